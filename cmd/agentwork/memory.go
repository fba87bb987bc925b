package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/agentwork/agentwork/tools/memory"
)

const memoryUsage = `usage: agentwork memory <command> [flags]

commands:
  show                  the documents: name, file, size, revision, last update
  show <doc> [--history]
                        a document's Markdown (doc: long, today, yesterday,
                        YYYY-MM-DD, checklist); --history: its kept revisions
  edit <doc>            edit a document in $EDITOR; saved only if nobody wrote
                        it meanwhile (else your text is kept in a file it names)
  restore <doc> --revision N
                        write a kept revision (show <doc> --history) back
                        over the document; the current one stays in the history
  export <dir>          write every document as Markdown: MEMORY.md,
                        HEARTBEAT.md, memory/YYYY-MM-DD.md
  import <dir>          write those files over the documents

Every command takes --data-dir / --url / --config to find the server, and --json.`

// cmdMemory implements `agentwork memory show|edit|restore|export|import` over the
// memory NATS service of a running server.
func cmdMemory(ctx context.Context, e *env, args []string) error {
	verb, fs, gf, done, err := group{"memory", memoryUsage}.verb(e, args)
	if done {
		return err
	}
	var run func(ctx context.Context, c *memory.Client, pos []string) error
	parent := ctx // without the --timeout of the bus calls: a person edits
	switch verb {
	case "show":
		history := fs.Bool("history", false, "show the document's kept revisions, newest first")
		run = func(ctx context.Context, c *memory.Client, pos []string) error {
			switch {
			case len(pos) == 0 && *history:
				return usageError{"memory show --history: name the document, e.g. agentwork memory show checklist --history"}
			case len(pos) == 0:
				return show(e, *gf.json, memoryPrintList)(c.List(ctx))
			case len(pos) > 1:
				return usageError{"memory show: want at most one document (long, today, yesterday, YYYY-MM-DD, checklist)"}
			case *history:
				return show(e, *gf.json, memoryPrintHistory)(c.History(ctx, pos[0]))
			}
			return show(e, *gf.json, func(w io.Writer, d memory.Doc) { fmt.Fprint(w, d.Text) })(c.Get(ctx, pos[0]))
		}
	case "edit":
		run = func(ctx context.Context, c *memory.Client, pos []string) error {
			if len(pos) != 1 {
				return usageError{"memory edit: want one document, e.g. agentwork memory edit long"}
			}
			return memoryEdit(parent, *gf.timeout, e, c, pos[0])
		}
	case "restore":
		revision := fs.Uint64("revision", 0, "the kept revision to write back (agentwork memory show <doc> --history lists them)")
		run = func(ctx context.Context, c *memory.Client, pos []string) error {
			if len(pos) != 1 || *revision == 0 {
				return usageError{"memory restore: want one document and --revision, e.g. agentwork memory restore checklist --revision 3"}
			}
			return memoryRestore(ctx, e, c, pos[0], *revision)
		}
	case "export":
		run = func(ctx context.Context, c *memory.Client, pos []string) error {
			if len(pos) != 1 {
				return usageError{"memory export: want the folder to write to, e.g. agentwork memory export ./memory-backup"}
			}
			list, err := c.List(ctx)
			if err != nil {
				return err
			}
			docs := make([]memory.Doc, 0, len(list))
			for _, d := range list {
				full, err := c.Get(ctx, d.Name)
				if errors.Is(err, memory.ErrNotFound) {
					continue // expired meanwhile
				}
				if err != nil {
					return err
				}
				docs = append(docs, full)
			}
			files, err := memory.Export(pos[0], docs)
			if err != nil {
				return err
			}
			fmt.Fprintf(e.stderr, "exported %d document(s) to %s\n", len(files), pos[0])
			return nil
		}
	case "import":
		run = func(ctx context.Context, c *memory.Client, pos []string) error {
			if len(pos) != 1 {
				return usageError{"memory import: want the folder to read, as memory export writes it"}
			}
			docs, err := memory.ReadDir(pos[0])
			if err != nil {
				return err
			}
			var errs []error
			n := 0
			for _, d := range docs {
				if _, err := c.Put(ctx, d.Name, d.Text, "agentwork memory import", nil); err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", d.File, err))
					continue
				}
				n++
			}
			fmt.Fprintf(e.stderr, "imported %d of %d document(s) from %s\n", n, len(docs), pos[0])
			return errors.Join(errs...)
		}
	default:
		fmt.Fprintln(e.stderr, memoryUsage)
		return usageError{fmt.Sprintf("memory: unknown command %q (want show, edit, restore, export or import)", verb)}
	}
	pos, err := parseFlags(fs, args[1:])
	if err != nil {
		return quietHelp(err)
	}
	ctx, cancel := context.WithTimeout(ctx, *gf.timeout)
	defer cancel()
	b, err := gf.conn.dial(ctx)
	if err != nil {
		return err
	}
	defer b.Close()
	return run(ctx, memory.NewClient(b), pos)
}

// memoryEdit opens the document in $EDITOR and saves it at the revision
// it read. On a conflict the edited text stays in its file, and the error
// names it. timeout bounds the reading and the saving, not the editing.
func memoryEdit(ctx context.Context, timeout time.Duration, e *env, c *memory.Client, name string) error {
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	d, err := c.Get(rctx, name)
	if err != nil && !errors.Is(err, memory.ErrNotFound) {
		return err
	}
	f, err := os.CreateTemp("", "agentwork-memory-*.md")
	if err != nil {
		return err
	}
	path := f.Name()
	_, err = f.WriteString(d.Text)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	editor := os.Getenv("VISUAL")
	if editor == "" {
		editor = os.Getenv("EDITOR")
	}
	if editor == "" {
		editor = "vi"
	}
	cmd := exec.CommandContext(ctx, "sh", "-c", editor+` "$1"`, "sh", path)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, e.stdout, e.stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("memory edit: the editor (%s) failed: %w; your text is in %s", editor, err, path)
	}
	text, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if string(text) == d.Text {
		os.Remove(path)
		fmt.Fprintf(e.stderr, "%s: no change\n", d.File)
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	w, err := c.Put(wctx, name, string(text), "agentwork memory edit", &d.Revision)
	if errors.Is(err, memory.ErrConflict) {
		return fmt.Errorf("memory edit: not saved: %w; your text is kept in %s (agentwork memory edit %s again, and merge it in)", err, path, name)
	}
	if err != nil {
		return fmt.Errorf("memory edit: not saved: %w; your text is kept in %s", err, path)
	}
	os.Remove(path)
	fmt.Fprintf(e.stderr, "%s: saved (revision %d)\n", w.File, w.Revision)
	return nil
}

// memoryRestore writes the kept revision rev of the document back over it,
// at the revision it is at now (if someone writes it meanwhile, nothing is
// written and the error says so).
func memoryRestore(ctx context.Context, e *env, c *memory.Client, name string, rev uint64) error {
	hist, err := c.History(ctx, name)
	if err != nil {
		return err
	}
	var kept []string
	for _, d := range hist {
		if d.Revision != rev {
			kept = append(kept, fmt.Sprint(d.Revision))
			continue
		}
		if d.Revision == hist[0].Revision {
			fmt.Fprintf(e.stderr, "%s: revision %d is the current one; nothing to restore\n", d.File, rev)
			return nil
		}
		w, err := c.Put(ctx, name, d.Text, fmt.Sprintf("agentwork memory restore (revision %d)", rev), &hist[0].Revision)
		if err != nil {
			return fmt.Errorf("memory restore: not written: %w", err)
		}
		fmt.Fprintf(e.stderr, "%s: revision %d restored as revision %d\n", w.File, rev, w.Revision)
		return nil
	}
	return fmt.Errorf("memory restore: %s has no kept revision %d (kept: %s; agentwork memory show %s --history)", name, rev, strings.Join(kept, ", "), name)
}

func memoryPrintList(w io.Writer, docs []memory.Doc) {
	if len(docs) == 0 {
		fmt.Fprintln(w, "the memory is empty")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tFILE\tBYTES\tREVISION\tUPDATED\tBY")
	for _, d := range docs {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\n", d.Name, d.File, d.Bytes, d.Revision, d.Updated.Format("2006-01-02 15:04:05 MST"), oneLine(d.By, 40))
	}
	tw.Flush()
}

func memoryPrintHistory(w io.Writer, docs []memory.Doc) {
	for i, d := range docs {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "=== %s revision %d, %s, by %s\n", d.File, d.Revision, d.Updated.Format("2006-01-02 15:04:05 MST"), d.By)
		fmt.Fprint(w, strings.TrimRight(d.Text, "\n")+"\n")
	}
}
