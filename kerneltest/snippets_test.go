package kerneltest_test

import (
	"testing"

	"github.com/vkern/vkern/kernels"
	"github.com/vkern/vkern/kerneltest"
)

// TestEveryPlantedDefectApplies plants each defect, the CUDA ones too, into
// a copy of the sources without building anything: a kernel change that
// moves or rewrites a defect's snippet fails here, on a machine without a
// GPU, rather than at the next GPU call.
func TestEveryPlantedDefectApplies(t *testing.T) {
	for _, set := range []struct {
		backend string
		defects []kerneltest.Mutation
	}{{"cpu", kerneltest.CPUDefects}, {"cuda", kerneltest.CUDADefects}} {
		for _, m := range set.defects {
			files, _, err := kernels.Sources(set.backend)
			if err != nil {
				t.Fatalf("kernels.Sources(%q): %v", set.backend, err)
			}
			before := string(files[m.File])
			if err := m.Plant()(files); err != nil {
				t.Errorf("%s: %v", set.backend, err)
				continue
			}
			if m.File != "" && string(files[m.File]) == before && before != "" {
				t.Errorf("%s: planted defect %q left %s as it was", set.backend, m.Name, m.File)
			}
		}
	}
}
