package faultcheck

import (
	"os"
	"strings"
)

// raceExit is the exit status of a process built with -race whose race
// detector found a data race.
const raceExit = 66

// knownRaces are data races inside a store's driver that baton cannot
// avoid, each as the first frames of its two conflicting accesses.
// go-zookeeper/zk v1.0.4 reads Conn.lastZxid in sendSetWatches, on
// reconnecting with watches set, while its receive loop writes it
// (samuel/go-zookeeper#260, unfixed upstream); faultcheck's resets and
// partitions reconnect often enough to meet it.
var knownRaces = [][2]string{
	{"github.com/go-zookeeper/zk.(*Conn).recvLoop()", "github.com/go-zookeeper/zk.(*Conn).sendSetWatches()"},
}

// onlyKnownRaces reports whether the worker log at path, from offset on,
// reports at least one data race and only known ones.
func onlyKnownRaces(path string, offset int64) bool {
	b, err := os.ReadFile(path)
	if err != nil || offset > int64(len(b)) {
		return false
	}
	blocks := strings.Split(string(b[offset:]), "WARNING: DATA RACE")
	if len(blocks) < 2 {
		return false
	}
	for _, blk := range blocks[1:] {
		if !knownRace(blk) {
			return false
		}
	}
	return true
}

// knownRace reports whether one race report is a known race: the first
// frame of each access is one of a known pair.
func knownRace(report string) bool {
	var frames []string
	lines := strings.Split(report, "\n")
	for i, l := range lines {
		l = strings.TrimSpace(l)
		if i+1 < len(lines) && (strings.HasPrefix(l, "Write at ") || strings.HasPrefix(l, "Read at ") ||
			strings.HasPrefix(l, "Previous write at ") || strings.HasPrefix(l, "Previous read at ")) {
			frames = append(frames, strings.TrimSpace(lines[i+1]))
		}
	}
	if len(frames) != 2 {
		return false
	}
	for _, k := range knownRaces {
		if frames[0] == k[0] && frames[1] == k[1] || frames[0] == k[1] && frames[1] == k[0] {
			return true
		}
	}
	return false
}
