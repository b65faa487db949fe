package main

import (
	"embed"

	"github.com/vkern/vkern/oracle"
	"github.com/vkern/vkern/userop"
)

// kernelFiles are the kernel sources, embedded in the binary so that it
// builds its kernel server wherever it runs (a GPU machine included).
//
//go:embed kernels
var kernelFiles embed.FS

// Ops are this program's ops: each one's contract (rmsnorm.go,
// swiglu.go), float64 reference and kernels. rmsnorm and rmsnorm_grad
// share their files.
func Ops() []userop.Op {
	rmsCPU := userop.Kernel{FS: kernelFiles, Files: []string{"kernels/cpu/rmsnorm.cc"}}
	rmsCUDA := userop.Kernel{FS: kernelFiles, Files: []string{"kernels/cuda/rmsnorm.cu"}}
	return []userop.Op{
		{Contract: RMSNorm, Reference: oracle.Spec{Compute: rmsNormCompute, Generate: rmsNormGenerate}, CPU: rmsCPU, CUDA: rmsCUDA},
		{Contract: RMSNormGrad, Reference: oracle.Spec{Compute: rmsNormGradCompute, Generate: rmsNormGradGenerate}, CPU: rmsCPU, CUDA: rmsCUDA},
		{Contract: SwiGLU, Reference: oracle.Spec{Compute: swiGLUCompute},
			CPU:  userop.Kernel{FS: kernelFiles, Files: []string{"kernels/cpu/swiglu.cc"}},
			CUDA: userop.Kernel{FS: kernelFiles, Files: []string{"kernels/cuda/swiglu.cu"}}},
	}
}
