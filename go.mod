module github.com/vkern/vkern

go 1.26.0

require (
	github.com/nlpodyssey/safetensors v0.0.0-20250209183917-bfb01cc25f7c
	golang.org/x/sys v0.49.0
	golang.org/x/term v0.47.0
)
