package redis

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"
)

// tagLen is the length of a name's hash tag: 128 bits of SHA-256, in hex.
const tagLen = 32

// base returns "<prefix>:{<tag>}:", the start of every key of name.
func (s *Store) base(name string) string { return s.key(name, "") }

func (s *Store) stateKey(name string) string { return s.key(name, "r") }

// appendTag appends name's hash tag to b.
func (s *Store) appendTag(b []byte, name string) []byte {
	sum := sha256.Sum256([]byte(name))
	return hex.AppendEncode(b, sum[:tagLen/2])
}

// key returns base(name) followed by suffix, in one allocation.
func (s *Store) key(name, suffix string) string {
	var tag [tagLen]byte
	s.appendTag(tag[:0], name)
	var b strings.Builder
	b.Grow(len(s.prefix) + tagLen + 4 + len(suffix))
	b.WriteString(s.prefix)
	b.WriteString(":{")
	b.Write(tag[:])
	b.WriteString("}:")
	b.WriteString(suffix)
	return b.String()
}

// isStateKey reports whether key, found by SCAN, is a state key of this
// store's prefix (and not, say, a mailbox of an owner called "r").
func (s *Store) isStateKey(key string) bool {
	rest, ok := strings.CutPrefix(key, s.prefix+":{")
	if !ok || len(rest) != tagLen+3 || rest[tagLen:] != "}:r" {
		return false
	}
	for _, c := range []byte(rest[:tagLen]) {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// scanPattern matches every state key of this store's prefix.
func (s *Store) scanPattern() string {
	var b strings.Builder
	for _, c := range []byte(s.prefix) {
		switch c {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteByte(c)
	}
	b.WriteString(":{")
	b.WriteString(strings.Repeat("?", tagLen))
	b.WriteString("}:r")
	return b.String()
}

// hashTag is the part of key that Redis Cluster (and go-redis's Ring)
// hash: the text between the first '{' and the next '}', if not empty.
func hashTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

// slot is the Redis Cluster hash slot of key.
func slot(key string) int { return int(crc16(hashTag(key)) % 16384) }

// crc16 is CRC-16/XMODEM, the checksum of Redis Cluster's key slots.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// groups splits the indexes 0…n-1 of keys into groups that one script may
// run on together, of at most maxKeys each: all of them on one server, the
// keys of one slot in a cluster, of one name with a Ring. key(i) is the
// i-th key, asked for only when the keys are spread.
func (s *Store) groups(n int, key func(i int) string) [][]int {
	if n == 0 {
		return nil
	}
	var by func(string) any
	switch s.rdb.(type) {
	case *redis.Client:
		all := make([]int, n)
		for i := range all {
			all[i] = i
		}
		return slices.Collect(slices.Chunk(all, maxKeys))
	case *redis.ClusterClient:
		by = func(k string) any { return slot(k) }
	default:
		by = func(k string) any { return hashTag(k) }
	}
	var out [][]int
	at := map[any]int{}
	for i := range n {
		g := by(key(i))
		j, ok := at[g]
		if !ok || len(out[j]) == maxKeys {
			j = len(out)
			at[g] = j
			out = append(out, nil)
		}
		out[j] = append(out[j], i)
	}
	return out
}
