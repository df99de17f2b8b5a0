package search

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// An index directory that cannot be opened is moved aside and rebuilt, not
// a reason to refuse to start.
func TestUnreadableIndexIsRebuilt(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "index.bleve")
	require.NoError(t, os.MkdirAll(path, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(path, "index_meta.json"), []byte("{not json"), 0o644))
	x, rebuilt, err := Open(dir, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	defer x.Close()
	require.True(t, rebuilt)
	cp, err := x.Checkpoint()
	require.NoError(t, err)
	require.Equal(t, StreamStart, cp, "a rebuilt index replays the stream from its start")
	matches, _ := filepath.Glob(filepath.Join(dir, "index.bleve.broken-*"))
	require.Len(t, matches, 1, "the unreadable one is kept aside, not deleted")
}
