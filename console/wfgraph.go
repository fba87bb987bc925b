package console

import (
	"sort"
	"strconv"
	"strings"

	"github.com/agentwork/agentwork/workflow"
)

// Geometry of the step graph (SVG user units): boxes of nodeW x nodeH,
// gapY between a step and the next, gapX between parallel branches.
const (
	nodeW, nodeH = 150, 40
	gapX, gapY   = 16, 24
	graphPad     = 8
	nodeIDMax    = 20 // a longer id is cut in its box (its <title> has it whole)
)

// stepGraph is the server-drawn SVG graph of a workflow run's steps: the
// steps top to bottom in their order, the branches of a parallel step
// side by side under it. Every number in it is computed here.
type stepGraph struct {
	W, H  int
	Nodes []graphNode
	Edges []graphEdge
	Label string // the graph's text alternative
}

type graphNode struct {
	X, Y, W, H     int
	TextX          int
	ID, Text, Kind string
	Status         string // the step's status, as the timeline shows it
	Class          string // "node st-<status>": the box's colour
	Branch         string // the parallel branch it is in, if any
}

type graphEdge struct{ X1, Y1, X2, Y2 int }

type point struct{ x, y int }

// drawSteps lays out steps, coloured by their states (a step without a
// state is pending). It is nil when there are no steps.
func drawSteps(steps []workflow.Step, states map[string]*workflow.StepState) *stepGraph {
	if len(steps) == 0 {
		return nil
	}
	g := &stepGraph{}
	w := listWidth(steps)
	_, bottom := g.place(steps, graphPad, graphPad, w, nil, states, "")
	g.W, g.H = w+2*graphPad, bottom-gapY+graphPad
	g.Label = "The steps in order, top to bottom, each with its status: " + g.summary() + "."
	return g
}

func stepWidth(s workflow.Step) int {
	if len(s.Parallel) == 0 {
		return nodeW
	}
	w := 0
	for _, b := range branchNames(s) {
		w += listWidth(s.Parallel[b]) + gapX
	}
	return max(nodeW, w-gapX)
}

func listWidth(steps []workflow.Step) int {
	w := nodeW
	for _, s := range steps {
		w = max(w, stepWidth(s))
	}
	return w
}

func branchNames(s workflow.Step) []string {
	names := make([]string, 0, len(s.Parallel))
	for b := range s.Parallel {
		names = append(names, b)
	}
	sort.Strings(names)
	return names
}

// place lays steps out in the column [x, x+w) from y down, each box
// joined to from (the bottoms of what came before); it returns the
// bottoms its last step leaves and the y under it.
func (g *stepGraph) place(steps []workflow.Step, x, y, w int, from []point, states map[string]*workflow.StepState, branch string) ([]point, int) {
	for _, s := range steps {
		n := graphNode{X: x + (w-nodeW)/2, Y: y, W: nodeW, H: nodeH, ID: s.ID, Text: s.ID, Status: "pending", Branch: branch}
		n.TextX = n.X + nodeW/2
		if len([]rune(n.Text)) > nodeIDMax {
			n.Text = string([]rune(n.Text)[:nodeIDMax-1]) + "…"
		}
		n.Kind, _ = s.Kind()
		if st := states[s.ID]; st != nil {
			n.Status = string(st.Status)
		}
		n.Class = "node st-" + classWord(n.Status)
		top := point{n.TextX, n.Y}
		for _, p := range from {
			g.Edges = append(g.Edges, graphEdge{p.x, p.y, top.x, top.y})
		}
		g.Nodes = append(g.Nodes, n)
		from = []point{{n.TextX, n.Y + nodeH}}
		y += nodeH + gapY
		if len(s.Parallel) == 0 {
			continue
		}
		// The branches side by side, centred under the step.
		names := branchNames(s)
		total := stepWidth(s)
		bx := x + (w-total)/2
		var ends []point
		bottom := y
		for _, b := range names {
			bw := listWidth(s.Parallel[b])
			tails, by := g.place(s.Parallel[b], bx, y, bw, from, states, b)
			ends = append(ends, tails...)
			bottom = max(bottom, by)
			bx += bw + gapX
		}
		from, y = ends, bottom
	}
	return from, y
}

// classWord keeps the letters, digits and underscores of a status: a
// class is one word whatever the record says.
func classWord(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		}
	}
	if b.Len() == 0 {
		return "unknown"
	}
	return b.String()
}

// summary counts the steps by status, in the order they first appear.
func (g *stepGraph) summary() string {
	var order []string
	count := map[string]int{}
	for _, n := range g.Nodes {
		if count[n.Status] == 0 {
			order = append(order, n.Status)
		}
		count[n.Status]++
	}
	parts := make([]string, 0, len(order))
	for _, st := range order {
		parts = append(parts, strconv.Itoa(count[st])+" "+st)
	}
	return strings.Join(parts, ", ")
}
