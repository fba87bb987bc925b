package config_test

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentwork/agentwork/config"
)

// writeJobs writes a config of n cron jobs to a file in dir: every
// hundredth every two seconds, the others daily at i%24:i%60.
func writeJobs(tb testing.TB, dir string, n int) string {
	tb.Helper()
	path := filepath.Join(dir, "agentwork.yaml")
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	w := bufio.NewWriter(f)
	fmt.Fprintln(w, "cron:\n  jobs:")
	for i := range n {
		sched := fmt.Sprintf("%d %d * * *", i%60, i%24)
		if i%100 == 0 {
			sched = "*/2 * * * * *"
		}
		fmt.Fprintf(w, "    - {id: job-%06d, schedule: %q, prompt: p, deliver: none}\n", i, sched)
	}
	if err := w.Flush(); err != nil {
		tb.Fatal(err)
	}
	if err := f.Close(); err != nil {
		tb.Fatal(err)
	}
	return path
}

// BenchmarkLoad100k is config.Load of a file of 100,000 cron jobs (7.3
// MB), the most of a first start's time with that many: parse, check the
// keys, decode, expand, find the secrets, validate.
func BenchmarkLoad100k(b *testing.B) {
	const n = 100_000
	path := writeJobs(b, b.TempDir(), n)
	b.ReportAllocs()
	for b.Loop() {
		f, err := config.Load(path, nil)
		if err != nil {
			b.Fatal(err)
		}
		if len(f.Cron.Jobs) != n {
			b.Fatalf("Load: %d jobs, want %d", len(f.Cron.Jobs), n)
		}
	}
}
