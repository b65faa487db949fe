package kerneltest_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/vkern/vkern"
	"github.com/vkern/vkern/kerneltest"
	"github.com/vkern/vkern/toolchain"
	"github.com/vkern/vkern/verify"
)

// The cpu backend's planted defects (CPUDefects) run here, in a test
// binary of their own, rather than beside the root package's tests: they
// build one server per defect, about 330 s on two cores, and together the
// two came near go test's ten minutes a package. The CUDA ones run in the
// root package (cuda_test.go), whose test binary is what a GPU machine
// without Go is given.
func TestPlantedDefectsInTheCPUKernelsAreIncorrect(t *testing.T) {
	if testing.Short() {
		t.Skip("builds one server per planted defect")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := toolchain.Detect(ctx, "cpu"); err != nil {
		t.Skipf("the cpu backend cannot be built or run here: %v", err)
	}
	cache := os.Getenv("VKERN_CACHE")
	if cache == "" {
		cache = t.TempDir()
	}
	kerneltest.Planted(t, func(t *testing.T, edit func(map[string][]byte) error) verify.Device {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		dev, err := vkern.Open(ctx, vkern.Options{Backend: "cpu", CacheDir: cache, EditSources: edit, QuickBuild: true})
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		t.Cleanup(func() { dev.Close() })
		return dev
	}, kerneltest.CPUDefects)
}
