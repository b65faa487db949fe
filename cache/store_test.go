package cache

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDefaultDir(t *testing.T) {
	tmp := t.TempDir()
	tests := []struct {
		name    string
		env     map[string]string
		want    string // "" means an error is expected
		wantErr string
	}{
		{name: "VKERN_CACHE wins", env: map[string]string{"VKERN_CACHE": "/srv/vkern-cache", "XDG_CACHE_HOME": tmp}, want: "/srv/vkern-cache"},
		{name: "a relative VKERN_CACHE is made absolute", env: map[string]string{"VKERN_CACHE": "rel/cache"}, want: "$CWD/rel/cache"},
		{name: "without VKERN_CACHE the user cache folder is used", env: map[string]string{"VKERN_CACHE": "", "XDG_CACHE_HOME": tmp}, want: filepath.Join(tmp, "vkern")},
		{name: "with no cache folder at all the error says to set VKERN_CACHE",
			env:     map[string]string{"VKERN_CACHE": "", "XDG_CACHE_HOME": "", "HOME": ""},
			wantErr: "set VKERN_CACHE="},
	}
	cwd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			got, err := DefaultDir()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("DefaultDir = %q, %v; want an error containing %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if want := strings.Replace(tt.want, "$CWD", cwd, 1); got != want {
				t.Errorf("DefaultDir = %q, want %q", got, want)
			}
		})
	}
}

func TestOpen(t *testing.T) {
	t.Run("a missing folder is created", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "a", "b", "cache")
		s, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() || s.Dir != dir {
			t.Errorf("after Open(%q): Dir=%q, stat %v", dir, s.Dir, err)
		}
		if left, _ := os.ReadDir(dir); len(left) != 0 {
			t.Errorf("Open left files behind: %v", left)
		}
	})

	unwritable := []struct {
		name  string
		setup func(t *testing.T) string // returns the folder to open
	}{
		{
			name: "a folder under a regular file is refused with the fix",
			setup: func(t *testing.T) string {
				file := filepath.Join(t.TempDir(), "plain-file")
				if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
					t.Fatal(err)
				}
				return filepath.Join(file, "cache")
			},
		},
		{
			name: "a read-only folder is refused with the fix",
			setup: func(t *testing.T) string {
				if os.Geteuid() == 0 {
					t.Skip("running as root, which ignores folder permissions; the folder under a regular file covers unwritable folders for root")
				}
				dir := filepath.Join(t.TempDir(), "ro")
				if err := os.Mkdir(dir, 0o500); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { os.Chmod(dir, 0o700) })
				return dir
			},
		},
	}
	for _, tt := range unwritable {
		t.Run(tt.name, func(t *testing.T) {
			dir := tt.setup(t)
			s, err := Open(dir)
			if err == nil {
				t.Fatalf("Open(%q) = %+v, want an error", dir, s)
			}
			for _, want := range []string{dir, "set VKERN_CACHE to a writable folder"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error lacks %q:\n%v", want, err)
				}
			}
		})
	}
}
