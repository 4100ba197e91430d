package metadata

import (
	"fmt"
	"net/url"
	"sort"
	"strings"
	"unicode"
)

// ConnSettings are libpq keyword/value connection parameters. They are kept
// apart from their string form so that a node's parameters can be derived
// from the coordinator's, and so that nothing prints a password.
type ConnSettings map[string]string

// ParseConnString parses a keyword/value string ("host=a port=5432") or a
// postgres:// URL into settings. An empty string gives empty settings, which
// libpq's PG* environment variables then fill.
func ParseConnString(s string) (ConnSettings, error) {
	s = strings.TrimSpace(s)
	out := ConnSettings{}
	if s == "" {
		return out, nil
	}
	if strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://") {
		u, err := url.Parse(s)
		if err != nil {
			return nil, invalidf("the connection URL cannot be parsed; check its syntax")
		}
		if u.User != nil {
			out["user"] = u.User.Username()
			if p, ok := u.User.Password(); ok {
				out["password"] = p
			}
		}
		if h := u.Hostname(); h != "" {
			out["host"] = h
		}
		if p := u.Port(); p != "" {
			out["port"] = p
		}
		if db := strings.TrimPrefix(u.Path, "/"); db != "" {
			out["dbname"] = db
		}
		for k, v := range u.Query() {
			if len(v) > 0 {
				out[k] = v[len(v)-1]
			}
		}
		return out, nil
	}
	rest := s
	for {
		rest = strings.TrimLeftFunc(rest, unicode.IsSpace)
		if rest == "" {
			return out, nil
		}
		eq := strings.IndexByte(rest, '=')
		if eq <= 0 {
			return nil, invalidf("the connection string must be key=value pairs or a postgres:// URL")
		}
		key := strings.TrimSpace(rest[:eq])
		rest = strings.TrimLeftFunc(rest[eq+1:], unicode.IsSpace)
		var val strings.Builder
		if strings.HasPrefix(rest, "'") {
			rest = rest[1:]
			closed := false
			for len(rest) > 0 {
				ch := rest[0]
				rest = rest[1:]
				if ch == '\\' && len(rest) > 0 {
					val.WriteByte(rest[0])
					rest = rest[1:]
					continue
				}
				if ch == '\'' {
					closed = true
					break
				}
				val.WriteByte(ch)
			}
			if !closed {
				return nil, invalidf("the connection string has an unterminated quote after %s=", key)
			}
		} else {
			end := strings.IndexFunc(rest, unicode.IsSpace)
			if end < 0 {
				end = len(rest)
			}
			v := rest[:end]
			rest = rest[end:]
			for i := 0; i < len(v); i++ {
				if v[i] == '\\' && i+1 < len(v) {
					i++
				}
				val.WriteByte(v[i])
			}
		}
		if key == "database" {
			key = "dbname"
		}
		out[key] = val.String()
	}
}

// Merge returns a copy of s with every key of over set.
func (s ConnSettings) Merge(over ConnSettings) ConnSettings {
	out := make(ConnSettings, len(s)+len(over))
	for k, v := range s {
		out[k] = v
	}
	for k, v := range over {
		out[k] = v
	}
	return out
}

// String renders keyword/value form, quoted. It contains the password when
// there is one: pass it to a driver, never to a log.
func (s ConnSettings) String() string {
	keys := make([]string, 0, len(s))
	for k := range s {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(' ')
		}
		v := strings.ReplaceAll(strings.ReplaceAll(s[k], `\`, `\\`), `'`, `\'`)
		fmt.Fprintf(&b, "%s='%s'", k, v)
	}
	return b.String()
}

// Describe names the server for people: host:port, nothing else.
func (s ConnSettings) Describe() string {
	host, port := s["host"], s["port"]
	if host == "" {
		host = envOr("PGHOST", "localhost")
	}
	if port == "" {
		port = envOr("PGPORT", "5432")
	}
	return host + ":" + port
}
