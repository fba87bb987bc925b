package config

import (
	"fmt"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestEntriesWalksEachMergedMappingOnce: 2,000 headers maps, each merging
// the one before, are read with one set of walked mappings (as Parse
// does): each mapping's entries come once in all, not once for every map
// that merges it (2 million for this file, and minutes for a larger one,
// before the decoder ever sees it).
func TestEntriesWalksEachMergedMappingOnce(t *testing.T) {
	const k = 2000
	var b strings.Builder
	b.WriteString("- headers: &m0 {Authorization: Bearer-chain-0123456789}\n")
	for i := 1; i < k; i++ {
		fmt.Fprintf(&b, "- headers: &m%d {<<: *m%d, a%d: b}\n", i, i-1, i)
	}
	var root yaml.Node
	if err := yaml.Unmarshal([]byte(b.String()), &root); err != nil {
		t.Fatal(err)
	}
	walked := map[*yaml.Node]bool{}
	yields := 0
	var secrets []string
	for _, item := range root.Content[0].Content {
		headers := item.Content[1]
		for name, v := range entries(headers, walked) {
			yields++
			if credentialName.MatchString(name) {
				secrets = append(secrets, v.Value)
			}
		}
	}
	if yields > 2*k {
		t.Errorf("%d maps each merging the one before gave %d entries in all; want each mapping's once (%d)", k, yields, 2*k-1)
	}
	if len(secrets) != 1 || secrets[0] != "Bearer-chain-0123456789" {
		t.Errorf("secrets %q, want the first map's Authorization once", secrets)
	}
}
