package vkern_test

import (
	"context"
	"fmt"
	"log"

	"github.com/vkern/vkern"
	"github.com/vkern/vkern/f16"
	"github.com/vkern/vkern/op"
)

// A 2×3 by 3×2 product on the cpu backend: open a device, allocate, write,
// run, read.
func Example() {
	ctx := context.Background()
	dev, err := vkern.Open(ctx, vkern.Options{Backend: "cpu"})
	if err != nil {
		log.Fatal(err)
	}
	defer dev.Close()

	gemm, _ := op.Lookup("gemm")
	shape, _ := gemm.ParseShape("2x2x3") // M=2, N=2, K=3
	toF16 := func(v ...float32) []uint16 {
		out := make([]uint16, len(v))
		f16.EncodeFloat32s(out, v)
		return out
	}
	a, _ := dev.Alloc(ctx, 2*3*2) // A: f16 2×3
	b, _ := dev.Alloc(ctx, 3*2*2) // B: f16 3×2
	c, _ := dev.Alloc(ctx, 2*2*4) // C: f32 2×2
	if err := a.WriteF16(ctx, toF16(1, 2, 3, 4, 5, 6)); err != nil {
		log.Fatal(err)
	}
	if err := b.WriteF16(ctx, toF16(1, 0, 0, 1, 1, 1)); err != nil {
		log.Fatal(err)
	}
	if _, err := dev.Run(ctx, gemm, shape, a, b, c); err != nil {
		log.Fatal(err)
	}
	out := make([]float32, 4)
	if err := c.ReadF32(ctx, out); err != nil {
		log.Fatal(err)
	}
	fmt.Println(out)
	// Output: [4 5 10 11]
}

// Verify-style use: the op registry says what a call must look like.
func ExampleDevice_Run_contract() {
	softmax, _ := op.Lookup("softmax")
	shape, err := softmax.ParseShape("0x10")
	fmt.Println(err)
	shape, _ = softmax.ParseShape("4x10")
	fmt.Println(softmax.CheckLengths(shape, []int64{40, 30}))
	// Output:
	// softmax: R = 0 in shape 0x10; every dimension must be at least 1
	// softmax: Y has 30 elements, want R·C = 40 (R=4, C=10)
}

// cross_entropy with an ignore_index: three rows of four classes, the middle
// row ignored. loss holds each row's loss, unscaled (PyTorch's mean loss is
// their sum over n = 2, the rows not ignored); dLogits is the gradient of
// that mean: (softmax − onehot)/2, and zeros for the ignored row.
func Example_crossEntropy() {
	ctx := context.Background()
	dev, err := vkern.Open(ctx, vkern.Options{Backend: "cpu"})
	if err != nil {
		log.Fatal(err)
	}
	defer dev.Close()

	ce, _ := op.Lookup("cross_entropy")
	shape, _ := ce.ParseShape("3x4:ignore_index=-100") // R=3 rows, V=4 classes
	logits := make([]uint16, 12)
	f16.EncodeFloat32s(logits, []float32{0, 0, 0, 0, 5, 5, 5, 5, 1, 0, 0, 0})
	x, _ := dev.Alloc(ctx, 3*4*2)       // logits: f16 3×4
	labels, _ := dev.Alloc(ctx, 3*4)    // labels: i32 3
	loss, _ := dev.Alloc(ctx, 3*4)      // loss: f32 3
	dLogits, _ := dev.Alloc(ctx, 3*4*2) // dLogits: f16 3×4
	if err := x.WriteF16(ctx, logits); err != nil {
		log.Fatal(err)
	}
	if err := labels.WriteI32(ctx, []int32{2, -100, 0}); err != nil {
		log.Fatal(err)
	}
	if _, err := dev.Run(ctx, ce, shape, x, labels, loss, dLogits); err != nil {
		log.Fatal(err)
	}
	perRow := make([]float32, 3)
	grad := make([]uint16, 12)
	if err := loss.ReadF32(ctx, perRow); err != nil {
		log.Fatal(err)
	}
	if err := dLogits.ReadF16(ctx, grad); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("loss %.4f\n", perRow)
	row := make([]float32, 4)
	for r := 0; r < 3; r++ {
		f16.DecodeFloat32s(row, grad[4*r:4*r+4])
		fmt.Printf("dLogits[%d] %.4f\n", r, row)
	}
	// Output:
	// loss [1.3863 0.0000 0.7437]
	// dLogits[0] [0.1250 0.1250 -0.3750 0.1250]
	// dLogits[1] [0.0000 0.0000 0.0000 0.0000]
	// dLogits[2] [-0.2622 0.0875 0.0875 0.0875]
}
