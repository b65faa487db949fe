module github.com/vkern/vkern/examples/userops

go 1.26.0

require github.com/vkern/vkern v0.0.0

require (
	github.com/nlpodyssey/safetensors v0.0.0-20250209183917-bfb01cc25f7c // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/term v0.47.0 // indirect
)

replace github.com/vkern/vkern => ../..
