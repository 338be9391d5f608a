package quality

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// BenchmarkQuality is make bench-quality: the whole library and the
// recorded traces (RecordedDir, KERF_QUALITY_TRACES; a recording shorter
// than the library's traces repeated to their length) through every
// strategy, the table and the goals printed, the plot of PlotTrace
// written to docs/ (docs/performance.md). make bench skips it unless
// KERF_BENCH_QUALITY=1.
func BenchmarkQuality(b *testing.B) {
	if os.Getenv("KERF_BENCH_QUALITY") != "1" {
		b.Skip("make bench-quality runs it (KERF_BENCH_QUALITY=1)")
	}
	for range b.N {
		traces := Library(0)
		for _, dir := range []string{RecordedDir, os.Getenv("KERF_QUALITY_TRACES")} {
			if dir == "" {
				continue
			}
			recorded, err := ReadTraces(dir)
			require.NoError(b, err)
			for _, t := range recorded {
				t, err := t.Repeated(LibraryDuration)
				require.NoError(b, err)
				traces = append(traces, t)
			}
		}
		perTrace, sums, err := Run(traces, PlotTrace)
		require.NoError(b, err)
		var out strings.Builder
		for _, t := range traces {
			out.WriteString("- " + t.Name + ": " + t.About + "\n")
		}
		out.WriteString("\n")
		require.NoError(b, WriteTable(&out, perTrace, sums))
		out.WriteString("\n")
		require.NoError(b, WriteGoals(&out, sums))
		b.Log("\n" + out.String())
		for _, rs := range perTrace {
			if rs[0].Trace != PlotTrace {
				continue
			}
			svg, err := Plot(Generate(PlotTrace, 0, 0), rs)
			require.NoError(b, err)
			path := filepath.Join("..", "..", "docs", "quality-"+PlotTrace+".svg")
			require.NoError(b, os.WriteFile(path, svg, 0o644))
			b.Logf("wrote %s", path)
		}
	}
}
