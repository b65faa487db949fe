package vkern

import (
	"testing"

	"github.com/vkern/vkern/kerneltest"
	"github.com/vkern/vkern/verify"
)

// The planted defects are listed in package kerneltest (defects.go). The
// cpu backend's run in that package's own test binary
// (kerneltest/planted_test.go); the CUDA ones here (cuda_test.go), in the
// test binary a GPU machine is given.

// runPlanted builds one server per defect on backend, in parallel, and
// checks that each is reported incorrect.
func runPlanted(t *testing.T, backend string, defects []kerneltest.Mutation) {
	if testing.Short() {
		t.Skip("builds one server per planted defect")
	}
	kerneltest.Planted(t, func(t *testing.T, edit func(map[string][]byte) error) verify.Device {
		return openBackend(t, backend, Options{EditSources: edit, QuickBuild: true})
	}, defects)
}
