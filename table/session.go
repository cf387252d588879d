package table

import (
	"strconv"
	"strings"

	"github.com/ceruleandb/cerulean/azerr"
	"github.com/ceruleandb/cerulean/storage"
)

// Session tokens (x-ms-session-token). A token is opaque to clients, but its text form is
// ours: "1:<engine>:<position>" — format version 1, the engine's name (storage.Engine.Name)
// and the commit position in decimal. Positions grow with every commit, so of two tokens
// from one store the one with the larger position covers the other; a replica router
// only compares positions.

// tokenPrefix is the format version; a later format changes it.
const tokenPrefix = "1:"

// FormatToken is the session token of position p on the named engine.
func FormatToken(engine string, p storage.Position) string {
	return tokenPrefix + engine + ":" + strconv.FormatUint(uint64(p), 10)
}

// ParseToken reads a session token header value for the named engine: one token, or a
// comma-separated list of them (the newest, the largest position, counts). Surrounding
// spaces are ignored and an empty value is no token (0). A value that is not such a
// list, or names another engine, is 400 InvalidHeaderValue naming the header.
func ParseToken(engine, header, value string) (storage.Position, error) {
	var newest storage.Position
	if strings.TrimSpace(value) == "" {
		return 0, nil
	}
	for _, tok := range strings.Split(value, ",") {
		tok = strings.TrimSpace(tok)
		rest, ok := strings.CutPrefix(tok, tokenPrefix)
		if !ok {
			return 0, badToken(header, tok, "it is not a session token this server issued")
		}
		name, pos, ok := strings.Cut(rest, ":")
		if !ok {
			return 0, badToken(header, tok, "it is not a session token this server issued")
		}
		if name != engine {
			return 0, badToken(header, tok, "it was issued by a server on the "+name+" engine, and this one runs on "+engine)
		}
		p, err := strconv.ParseUint(pos, 10, 64)
		if err != nil || pos == "" || pos[0] == '+' {
			return 0, badToken(header, tok, "its position is not a number")
		}
		newest = max(newest, storage.Position(p))
	}
	return newest, nil
}

func badToken(header, tok, why string) error {
	if len(tok) > 100 {
		tok = tok[:100] + "…"
	}
	return azerr.Newf(azerr.InvalidHeaderValue, "The session token '%s' is not valid: %s.", tok, why).WithDetail(header)
}
