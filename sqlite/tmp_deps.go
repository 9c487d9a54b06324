package sqlite

import (
	_ "github.com/fsnotify/fsnotify"
	_ "golang.org/x/sys/unix"
	_ "modernc.org/sqlite"
)
