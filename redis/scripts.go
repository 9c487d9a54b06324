package redis

import (
	"embed"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// The scripts are the .lua files of lua/, embedded: prelude.lua documents
// the keys and their layout and holds the general path (the grant rules of
// package lockstate), head.lua the clock and the fencing tokens, and each
// other file one script, which says what it takes and returns. A line
// "-- #include NAME" is replaced by lua/NAME.lua. Acquire and Release try
// fast paths before they include the prelude (an uncontended grant or
// release, an exclusive request joining a queue, an exclusive hold handed
// to the head of one): the prelude's general path costs more in Lua than
// the few commands of those steps.

//go:embed lua/*.lua
var luaFiles embed.FS

var (
	acquireScript = script("acquire")
	renewScript   = script("renew")
	releaseScript = script("release")
	listScript    = script("list")
	purgeScript   = script("purge")
	markScript    = script("mark")
	pokeScript    = script("poke")
	sessionScript = script("session")
	endScript     = script("endsession")
)

// script returns the script of lua/name.lua, its includes expanded.
func script(name string) *redis.Script {
	return redis.NewScript(luaSource(name))
}

// luaSource returns lua/name.lua with its includes expanded (once each).
func luaSource(name string) string {
	b, err := luaFiles.ReadFile("lua/" + name + ".lua")
	if err != nil {
		panic(fmt.Sprintf("redis: script %s: %v", name, err))
	}
	var out strings.Builder
	for line := range strings.Lines(string(b)) {
		inc, ok := strings.CutPrefix(strings.TrimRight(line, "\n"), "-- #include ")
		if !ok {
			out.WriteString(line)
			continue
		}
		out.WriteString(luaSource(inc))
	}
	return out.String()
}
