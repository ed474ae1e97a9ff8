package owner

import (
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const nobody = 65534

// needRoot skips unless the test may give files away.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to change a file's owner")
	}
}

// sudo is the Owner of a process that `sudo` started for nobody.
func sudo(t *testing.T) Owner {
	t.Helper()
	t.Setenv("SUDO_UID", "65534")
	t.Setenv("SUDO_GID", "65534")
	return Sudo(nil)
}

// ownerOf is path's uid and gid, not following a symbolic link.
func ownerOf(t *testing.T, path string) [2]uint32 {
	t.Helper()
	fi, err := os.Lstat(path)
	require.NoError(t, err)
	st := fi.Sys().(*syscall.Stat_t)
	return [2]uint32{st.Uid, st.Gid}
}

var (
	root = [2]uint32{0, 0}
	user = [2]uint32{nobody, nobody}
)

func write(t *testing.T, f *os.File, err error) {
	t.Helper()
	require.NoError(t, err)
	_, err = f.WriteString("x")
	require.NoError(t, err)
	require.NoError(t, f.Close())
}

func TestCreateGivesNewFiles(t *testing.T) {
	needRoot(t)
	o := sudo(t)
	dir := t.TempDir()
	p := filepath.Join(dir, "result.json")
	f, err := o.Create(p)
	write(t, f, err)
	assert.Equal(t, user, ownerOf(t, p))
	assert.Equal(t, root, ownerOf(t, dir), "the directory was there")

	// Written again: the file is still the user's.
	f, err = o.Create(p)
	write(t, f, err)
	assert.Equal(t, user, ownerOf(t, p))

	p = filepath.Join(dir, "bench.svg")
	f, err = o.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	write(t, f, err)
	assert.Equal(t, user, ownerOf(t, p))
}

func TestCreateLeavesExistingFiles(t *testing.T) {
	needRoot(t)
	o := sudo(t)
	p := filepath.Join(t.TempDir(), "result.json")
	require.NoError(t, os.WriteFile(p, []byte("old"), 0o644))
	f, err := o.Create(p)
	write(t, f, err)
	assert.Equal(t, root, ownerOf(t, p))
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	assert.Equal(t, "x", string(b), "truncated and written, as os.Create does")

	_, err = o.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	require.ErrorIs(t, err, fs.ErrExist)
	assert.Equal(t, root, ownerOf(t, p))
}

func TestCreateDoesNotFollowSymlinks(t *testing.T) {
	needRoot(t)
	o := sudo(t)
	dir := t.TempDir()
	target := filepath.Join(dir, "shadow")
	require.NoError(t, os.WriteFile(target, []byte("secret"), 0o600))
	link := filepath.Join(dir, "report.html")
	require.NoError(t, os.Symlink(target, link))

	f, err := o.Create(link)
	write(t, f, err)
	assert.Equal(t, root, ownerOf(t, target))
	assert.Equal(t, root, ownerOf(t, link))

	// A dangling link: the file is made where it points, as os.Create
	// makes it, and stays root's.
	target = filepath.Join(dir, "elsewhere")
	link = filepath.Join(dir, "junit.xml")
	require.NoError(t, os.Symlink(target, link))
	f, err = o.Create(link)
	write(t, f, err)
	assert.Equal(t, root, ownerOf(t, target))
	assert.Equal(t, root, ownerOf(t, link))
}

func TestMkdirAllGivesNewDirectories(t *testing.T) {
	needRoot(t)
	o := sudo(t)
	base := t.TempDir()
	existing := filepath.Join(base, "out")
	require.NoError(t, os.Mkdir(existing, 0o755))
	require.NoError(t, o.MkdirAll(filepath.Join(existing, "captures", "quickstart"), 0o755))
	assert.Equal(t, root, ownerOf(t, existing))
	assert.Equal(t, user, ownerOf(t, filepath.Join(existing, "captures")))
	assert.Equal(t, user, ownerOf(t, filepath.Join(existing, "captures", "quickstart")))
	require.NoError(t, o.MkdirAll(existing, 0o755), "there already")
	assert.Equal(t, root, ownerOf(t, existing))

	// Relative to the working directory, as a flag names it.
	t.Chdir(base)
	require.NoError(t, o.MkdirAll("rel/a", 0o755))
	assert.Equal(t, user, ownerOf(t, filepath.Join(base, "rel")))
	assert.Equal(t, user, ownerOf(t, filepath.Join(base, "rel", "a")))

	// A file in the way.
	file := filepath.Join(base, "file")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	require.ErrorIs(t, o.MkdirAll(filepath.Join(file, "sub"), 0o755), syscall.ENOTDIR)
	require.ErrorIs(t, o.MkdirAll(file, 0o755), syscall.ENOTDIR)
}

func TestMkdirAllDoesNotFollowSymlinks(t *testing.T) {
	needRoot(t)
	o := sudo(t)
	base := t.TempDir()
	real := filepath.Join(base, "real")
	require.NoError(t, os.Mkdir(real, 0o755))
	link := filepath.Join(base, "link")
	require.NoError(t, os.Symlink(real, link))
	require.NoError(t, o.MkdirAll(filepath.Join(link, "sub"), 0o755))
	assert.Equal(t, root, ownerOf(t, real))
	assert.Equal(t, root, ownerOf(t, link))
	assert.Equal(t, user, ownerOf(t, filepath.Join(real, "sub")))
}

func TestWithoutSudoNothingChanges(t *testing.T) {
	needRoot(t)
	for _, tc := range []struct {
		name     string
		uid, gid string
	}{
		{"no SUDO_UID", "", ""},
		{"bad SUDO_UID", "nobody", "65534"},
		{"bad SUDO_GID", "65534", "-2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("SUDO_UID", tc.uid)
			t.Setenv("SUDO_GID", tc.gid)
			o := Sudo(nil)
			dir := filepath.Join(t.TempDir(), "a", "b")
			require.NoError(t, o.MkdirAll(dir, 0o755))
			p := filepath.Join(dir, "f")
			f, err := o.Create(p)
			write(t, f, err)
			assert.Equal(t, root, ownerOf(t, filepath.Dir(dir)))
			assert.Equal(t, root, ownerOf(t, dir))
			assert.Equal(t, root, ownerOf(t, p))
		})
	}
	var zero Owner
	p := filepath.Join(t.TempDir(), "f")
	f, err := zero.Create(p)
	write(t, f, err)
	assert.Equal(t, root, ownerOf(t, p))
}
