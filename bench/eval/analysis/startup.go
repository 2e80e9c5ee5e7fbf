package analysis

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/slacker-dev/slacker/bench/corpus"
	"github.com/slacker-dev/slacker/bench/eval"
	"github.com/slacker-dev/slacker/bench/eval/startup"
	"github.com/slacker-dev/slacker/bench/workload"
)

// startupMethod says how bytes read at start-up are measured.
const startupMethod = "the 4 KiB blocks of the image each container's volume read from its base snapshot until the workload was ready " +
	"(Slacker records them per volume, below ext4 and the loop device: the level of the paper's blktrace), first container on a cold node, " +
	"second on the same node right after"

// startups runs every workload twice on a cold Slacker node and records what each
// container read (see Start).
func (r *Results) startups(ctx context.Context, o Options, ws []*workload.Workload) error {
	if err := eval.NeedRoot("analysis"); err != nil {
		return err
	}
	if err := eval.NeedTools(map[string]string{"nsenter": "util-linux", "curl": "curl", "bash": "bash"}); err != nil {
		return err
	}
	c, err := corpus.Open(corpus.Options{Dir: o.CorpusDir})
	if err != nil {
		return err
	}
	pair, err := eval.StartPair(ctx, eval.PairOptions{Dir: o.Dir, Binaries: o.Binaries, DaemonArgs: o.DaemonArgs})
	if err != nil {
		return err
	}
	defer pair.Close()
	r.StartMethod = startupMethod
	idx := map[string]int{}
	for i, im := range r.Images {
		idx[im.Name] = i
	}
	tags, err := c.Layout.Tags()
	if err != nil {
		return err
	}
	for _, w := range ws {
		img, err := eval.CorpusImage(c, w.Name)
		if err != nil {
			return err
		}
		_, cfg, err := c.Layout.Manifest(tags[img.Tag])
		if err != nil {
			return err
		}
		o.Progress.Printf("publishing %s for Slacker (%s)", w.Name, eval.HumanBytes(img.DataBytes))
		if err := pair.Publish(ctx, img, pair.Slacker); err != nil {
			r.Meta.Fail("%s: publish: %v", w.Name, err)
			continue
		}
		for run := 1; run <= max(o.Runs, 1); run++ {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			p, err := startup.Run(ctx, pair.Slacker, pair.Ref(pair.Slacker, w.Name), w, cfg.Config, filepath.Join(o.Dir, "startup"))
			st := StartOf(p)
			st.Run = run
			if err != nil {
				st.Error = err.Error()
				r.Meta.Fail("%s run %d: %v", w.Name, run, err)
			}
			o.Progress.Printf("%-16s run %d: ready in %.2fs reading %s (fetched %s, wrote %s); second run %.2fs reading %s, %s of it read by the first %s",
				w.Name, run, st.Seconds, eval.HumanBytes(st.ReadBytes), eval.HumanBytes(st.FetchedBytes), eval.HumanBytes(st.WrittenBytes),
				st.Seconds2, eval.HumanBytes(st.ReadBytes2), pctOf(st.HitBytes, st.ReadBytes2), st.Error)
			r.Images[idx[w.Name]].Starts = append(r.Images[idx[w.Name]].Starts, st)
		}
	}
	return nil
}

// StartOf turns a start-up pair into the analysis's record.
func StartOf(p startup.Pair) Start {
	st := Start{Seconds: p.First.Seconds, Seconds2: p.Second.Seconds}
	if p.First.HasStats {
		r1 := Runs(p.First.Stats.BaseReadRuns).Normalize()
		st.ReadBytes = r1.Blocks() * BlockSize
		st.RawReadBytes = p.First.Stats.BaseReadBytes
		st.FetchedBytes = p.First.Stats.FetchedBytes
		st.WrittenBytes = p.First.Stats.WrittenBytes
		st.Truncated = p.First.Stats.BaseReadRunsTruncated
		if p.Second.HasStats {
			r2 := Runs(p.Second.Stats.BaseReadRuns).Normalize()
			st.ReadBytes2 = r2.Blocks() * BlockSize
			st.HitBytes = r1.Intersect(r2) * BlockSize
			st.MissBytes = st.ReadBytes2 - st.HitBytes
			st.WrittenBytes2 = p.Second.Stats.WrittenBytes
			st.Truncated = st.Truncated || p.Second.Stats.BaseReadRunsTruncated
		}
	}
	return st
}

func pctOf(a, b int64) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(a)/float64(b))
}
