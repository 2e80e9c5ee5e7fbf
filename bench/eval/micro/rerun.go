package micro

import (
	"context"
	"math/rand/v2"
	"path/filepath"
	"slices"

	"github.com/slacker-dev/slacker/bench/corpus"
	"github.com/slacker-dev/slacker/bench/eval"
	"github.com/slacker-dev/slacker/bench/eval/startup"
	"github.com/slacker-dev/slacker/bench/workload"
)

// reruns starts every workload twice per system on one node (Fig 22).
func (r *Results) reruns(ctx context.Context, o Options, pair *eval.Pair, rng *rand.Rand) error {
	if err := eval.NeedTools(map[string]string{"nsenter": "util-linux", "curl": "curl", "bash": "bash"}); err != nil {
		return err
	}
	set, err := workload.ParseFile(o.Workloads)
	if err != nil {
		return err
	}
	c, err := corpus.Open(corpus.Options{Dir: o.CorpusDir})
	if err != nil {
		return err
	}
	tags, err := c.Layout.Tags()
	if err != nil {
		return err
	}
	for _, w := range set.Workloads {
		if len(o.Only) > 0 && !slices.Contains(o.Only, w.Name) {
			continue
		}
		img, err := eval.CorpusImage(c, w.Name)
		if err != nil {
			return err
		}
		_, cfg, err := c.Layout.Manifest(tags[img.Tag])
		if err != nil {
			return err
		}
		o.Progress.Printf("publishing %s (%s)", w.Name, eval.HumanBytes(img.DataBytes))
		if err := pair.Publish(ctx, img); err != nil {
			r.Meta.Fail("%s: publish: %v", w.Name, err)
			continue
		}
		runs := o.RerunRuns
		if runs < 1 {
			runs = o.Runs
		}
		for run := 1; run <= runs; run++ {
			for _, s := range pair.Shuffled(rng) {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				p, err := startup.Run(ctx, s, pair.Ref(s, w.Name), w, cfg.Config, filepath.Join(o.Dir, "rerun"))
				smp := RerunSample{System: s.Name(), Workload: w.Name, Category: string(w.Category), Run: run, First: p.First.Seconds, Second: p.Second.Seconds}
				if err != nil {
					smp.Error = err.Error()
					r.Meta.Fail("%s %s run %d: %v", s.Name(), w.Name, run, err)
				}
				o.Progress.Printf("run %d %-13s %-16s first %.2fs, second %.2fs %s", run, s.Name(), w.Name, smp.First, smp.Second, smp.Error)
				r.Rerun = append(r.Rerun, smp)
			}
		}
	}
	return nil
}
