package gpt_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/vkern/vkern"
	"github.com/vkern/vkern/data"
	"github.com/vkern/vkern/gpt"
)

// Train nano for a few steps on the cpu backend: open a device, allocate
// the model, initialise it, and take steps; each step is one batch of op
// calls to the kernel server and an update.
func Example() {
	ctx := context.Background()
	dev, err := vkern.Open(ctx, vkern.Options{Backend: "cpu"})
	if err != nil {
		log.Fatal(err)
	}
	defer dev.Close()

	// A corpus: here this package's own sources, bytes as tokens.
	files, _ := filepath.Glob("*.go")
	corpus, err := data.Load(ctx, files)
	if err != nil {
		log.Fatal(err)
	}

	m, err := gpt.New(ctx, dev, gpt.Nano, 8, 1) // 8 sequences a step, no accumulation
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close(ctx)
	if err := m.Init(ctx, 1); err != nil {
		log.Fatal(err)
	}
	tr := &gpt.Trainer{Model: m, Hyper: gpt.DefaultHyper(30), State: gpt.NewState(), Seed: 1, Corpus: corpus}
	tr.Hyper.LR = 5e-3
	first, last := 0.0, 0.0
	for tr.State.Step < 30 {
		r, err := tr.Step(ctx)
		if err != nil {
			log.Fatal(err)
		}
		if r.Step == 0 {
			first = r.Loss
		}
		last = r.Loss
	}
	fmt.Println("the loss fell:", last < first)

	// A checkpoint that transformers.GPT2LMHeadModel.from_pretrained loads.
	dir, _ := os.MkdirTemp("", "nano-")
	defer os.RemoveAll(dir)
	run := gpt.Run{Batch: m.B, Accum: m.K, Seed: tr.Seed, Hyper: tr.Hyper, State: tr.State, Data: corpus.Source}
	if err := m.Save(ctx, dir, run); err != nil {
		log.Fatal(err)
	}
	fmt.Println("saved at step", tr.State.Step)
	// Output:
	// the loss fell: true
	// saved at step 30
}
