package vkern

import (
	"testing"

	"github.com/vkern/vkern/kerneltest"
)

// The planted defects are listed in package kerneltest (defects.go).

func TestPlantedDefectsInTheCPUKernelsAreIncorrect(t *testing.T) {
	runPlanted(t, "cpu", kerneltest.CPUDefects)
}

// runPlanted builds one server per defect on backend, in parallel, and
// checks that each is reported incorrect.
func runPlanted(t *testing.T, backend string, defects []kerneltest.Mutation) {
	if testing.Short() {
		t.Skip("builds one server per planted defect")
	}
	for _, m := range defects {
		t.Run(m.Name, func(t *testing.T) {
			t.Parallel()
			dev := openBackend(t, backend, Options{EditSources: m.Plant(), QuickBuild: true})
			m.Run(t, dev)
		})
	}
}
