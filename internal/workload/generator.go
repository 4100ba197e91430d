package workload

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// User is a row of github_users.
type User struct {
	UserID       int64
	Login        string
	DisplayLogin string
	URL          string
	AvatarURL    string
	GravatarID   string
	CreatedAt    time.Time
}

// Values returns the row in github_users column order.
func (u User) Values() []any {
	return []any{u.UserID, u.Login, u.DisplayLogin, u.URL, u.AvatarURL, u.GravatarID, u.CreatedAt}
}

// UserColumns are github_users' columns in Values order.
var UserColumns = []string{"user_id", "login", "display_login", "url", "avatar_url", "gravatar_id", "created_at"}

// Event is a row of github_events.
type Event struct {
	EventID     int64
	EventType   string
	EventPublic bool
	RepoID      int64
	Payload     []byte // JSON
	Repo        []byte // JSON
	UserID      int64
	Org         []byte // JSON or nil
	CreatedAt   time.Time
}

// Values returns the row in github_events column order.
func (e Event) Values() []any {
	var org any
	if e.Org != nil {
		org = string(e.Org)
	}
	return []any{e.EventID, e.EventType, e.EventPublic, e.RepoID, string(e.Payload), string(e.Repo), e.UserID, org, e.CreatedAt}
}

// EventColumns are github_events' columns in Values order.
var EventColumns = []string{"event_id", "event_type", "event_public", "repo_id", "payload", "repo", "user_id", "org", "created_at"}

// Generator produces a deterministic GitHub-like data set.
type Generator struct {
	seed  uint64
	users int64
	zipf  *rand.Zipf
	rng   *rand.Rand
	base  time.Time
}

// NewGenerator returns a generator for the given number of users.
func NewGenerator(seed uint64, users int64) *Generator {
	if users < 1 {
		users = 1
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	return &Generator{
		seed:  seed,
		users: users,
		rng:   rng,
		// s = 1.2: the top 1% of users produce roughly half of the events.
		zipf: rand.NewZipf(rng, 1.2, 1, uint64(users-1)),
		base: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
	}
}

var (
	adjectives = []string{"quick", "lazy", "happy", "brave", "silent", "rapid", "clever", "shiny", "cosmic", "rusty", "gentle", "wild"}
	nouns      = []string{"otter", "falcon", "badger", "elephant", "panda", "koala", "tiger", "lynx", "heron", "walrus", "gopher", "penguin"}
	eventTypes = []struct {
		name   string
		weight int
	}{{"PushEvent", 50}, {"CreateEvent", 12}, {"WatchEvent", 10}, {"IssuesEvent", 7}, {"PullRequestEvent", 7},
		{"IssueCommentEvent", 6}, {"ForkEvent", 4}, {"DeleteEvent", 2}, {"GollumEvent", 1}, {"ReleaseEvent", 1}}
	words = strings.Fields("fix add update remove refactor improve handle support bump merge revert document test " +
		"parser planner shard replica cutover index query cache config logging metrics docs readme build release " +
		"the a of for in with when on error timeout race leak panic retry")
)

// User returns user id (1-based), the same every time for the same seed.
func (g *Generator) User(id int64) User {
	r := rand.New(rand.NewPCG(g.seed^uint64(id)*0x2545F4914F6CDD1D, uint64(id)))
	login := fmt.Sprintf("%s-%s-%d", adjectives[r.IntN(len(adjectives))], nouns[r.IntN(len(nouns))], id)
	return User{
		UserID:       id,
		Login:        login,
		DisplayLogin: login,
		URL:          "https://api.github.com/users/" + login,
		AvatarURL:    fmt.Sprintf("https://avatars.githubusercontent.com/u/%d?", id),
		GravatarID:   "",
		CreatedAt:    g.base.Add(-time.Duration(r.IntN(3650*24)) * time.Hour),
	}
}

// NextUserID draws a user id with skewed activity.
func (g *Generator) NextUserID() int64 { return int64(g.zipf.Uint64()) + 1 }

// Event returns event eventID for a skew-drawn user. Events are generated in
// sequence: call it with increasing ids for a deterministic data set.
func (g *Generator) Event(eventID int64) Event {
	return g.EventFor(eventID, g.NextUserID(), g.rng)
}

// EventFor builds an event for a given user with randomness from r.
func (g *Generator) EventFor(eventID, userID int64, r *rand.Rand) Event {
	typ := pickType(r)
	repoID := int64(r.IntN(5_000_000)) + 1
	repoName := fmt.Sprintf("%s/%s-%s", g.User(userID).Login, nouns[r.IntN(len(nouns))], adjectives[r.IntN(len(adjectives))])
	repo, _ := json.Marshal(map[string]any{"id": repoID, "name": repoName, "url": "https://api.github.com/repos/" + repoName})
	var org []byte
	if r.IntN(4) == 0 {
		oid := r.IntN(100_000) + 1
		org, _ = json.Marshal(map[string]any{"id": oid, "login": fmt.Sprintf("org-%d", oid), "url": fmt.Sprintf("https://api.github.com/orgs/org-%d", oid)})
	}
	return Event{
		EventID:     eventID,
		EventType:   typ,
		EventPublic: r.IntN(20) != 0,
		RepoID:      repoID,
		Payload:     payload(r, typ, 500+r.IntN(1500)),
		Repo:        repo,
		UserID:      userID,
		Org:         org,
		CreatedAt:   g.base.Add(time.Duration(eventID) * time.Second),
	}
}

func pickType(r *rand.Rand) string {
	total := 0
	for _, t := range eventTypes {
		total += t.weight
	}
	n := r.IntN(total)
	for _, t := range eventTypes {
		if n < t.weight {
			return t.name
		}
		n -= t.weight
	}
	return eventTypes[0].name
}

func sha(r *rand.Rand) string {
	var b [20]byte
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return hex.EncodeToString(b[:])
}

func sentence(r *rand.Rand, n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = words[r.IntN(len(words))]
	}
	return strings.Join(parts, " ")
}

// payload builds a JSON payload of about size bytes, shaped like GitHub's.
func payload(r *rand.Rand, typ string, size int) []byte {
	p := map[string]any{"rev": 0}
	switch typ {
	case "PushEvent":
		var commits []map[string]any
		p["push_id"] = r.Int64N(1 << 40)
		p["ref"] = "refs/heads/main"
		p["head"] = sha(r)
		p["before"] = sha(r)
		for est := 200; est < size; {
			c := map[string]any{"sha": sha(r), "message": sentence(r, 4+r.IntN(12)), "distinct": true,
				"author": map[string]any{"name": nouns[r.IntN(len(nouns))], "email": "dev@example.com"}}
			b, _ := json.Marshal(c)
			est += len(b)
			commits = append(commits, c)
		}
		p["commits"] = commits
		p["size"] = len(commits)
	default:
		p["action"] = []string{"opened", "closed", "created", "started", "published"}[r.IntN(5)]
		var body strings.Builder
		for body.Len() < size-150 {
			body.WriteString(sentence(r, 8))
			body.WriteString(". ")
		}
		p["body"] = body.String()
		p["number"] = r.IntN(10_000)
	}
	b, _ := json.Marshal(p)
	return b
}
