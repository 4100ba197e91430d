package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
)

// ErrNoBinaries is returned when no PostgreSQL server binaries can be found.
var ErrNoBinaries = errors.New("no PostgreSQL server binaries found: install Debian's postgresql-15 (apt-get install postgresql-15) or set PG_BINDIR to the folder holding initdb and pg_ctl")

// ErrPortInUse is returned (wrapped) when a port the sandbox needs is taken by
// something that is not this sandbox's server.
var ErrPortInUse = errors.New("port already in use")

// errBind marks a server start that failed because its port was taken.
var errBind = errors.New("port taken when the server started")

// ErrBadConfig is returned (wrapped) for invalid Config values.
var ErrBadConfig = errors.New("invalid sandbox configuration")

// ErrNotRunning is returned by Open when the directory holds no sandbox.
var ErrNotRunning = errors.New("no sandbox")

// Config describes a sandbox cluster.
type Config struct {
	// Dir holds sandbox.json and one data directory per node.
	Dir string
	// BasePort is the coordinator's port; worker i uses BasePort+i. Zero
	// picks free ports.
	BasePort int
	// Workers is the number of workers besides the coordinator (at least 1).
	Workers int
	// BinDir holds initdb, pg_ctl and postgres; empty means discover.
	BinDir string
	// Settings are extra postgresql.conf lines (key -> value), applied to
	// every node after the defaults.
	Settings map[string]string
	// Logger receives progress; nil means no logging.
	Logger *zap.Logger
	// Citus makes a new sandbox a Citus cluster (see citus.go): every node
	// preloads the citus library and has the extension, the coordinator is
	// registered with citus_set_coordinator_host and every worker with
	// citus_add_node. An existing sandbox keeps the flavor it was created
	// with; asking for Citus on an existing compat sandbox is ErrBadConfig.
	Citus bool
}

// DefaultConfig returns the CLI's defaults: ./.sandbox, ports 9700.., two workers.
func DefaultConfig() Config {
	return Config{Dir: ".sandbox", BasePort: 9700, Workers: 2}
}

// Node is one server of the sandbox.
type Node struct {
	Name    string `json:"name"` // "coordinator", "worker1", ...
	Host    string `json:"host"`
	Port    int    `json:"port"`
	DataDir string `json:"data_dir"`
}

// Addr returns host:port.
func (n Node) Addr() string { return net.JoinHostPort(n.Host, strconv.Itoa(n.Port)) }

// DSN returns a libpq keyword/value connection string for the node. The
// sandbox uses trust authentication, so it holds no password.
func (n Node) DSN() string {
	return fmt.Sprintf("host=%s port=%d user=postgres dbname=postgres sslmode=disable", n.Host, n.Port)
}

// Cluster is a sandbox on disk.
type Cluster struct {
	Dir      string            `json:"-"`
	BinDir   string            `json:"bin_dir"`
	Nodes    []Node            `json:"nodes"`
	Settings map[string]string `json:"settings,omitempty"`
	// FreePorts is set when the cluster was created with BasePort 0: every
	// node has its own reserved port (see ReservePorts), and a node whose
	// port was taken by the time its server bound it moves to another.
	FreePorts bool `json:"free_ports,omitempty"`
	// Citus is set when the sandbox is a Citus cluster (Config.Citus).
	Citus bool `json:"citus,omitempty"`

	log *zap.Logger
	mu  sync.Mutex
}

// Coordinator returns node 0.
func (c *Cluster) Coordinator() Node { return c.Nodes[0] }

// Workers returns nodes 1..N.
func (c *Cluster) Workers() []Node { return append([]Node(nil), c.Nodes[1:]...) }

const stateFile = "sandbox.json"

// Open loads the sandbox persisted in dir. It returns an error wrapping
// ErrNotRunning when dir holds none.
func Open(dir string, log *zap.Logger) (*Cluster, error) {
	if log == nil {
		log = zap.NewNop()
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(filepath.Join(abs, stateFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w in %s: start one with `shardmover sandbox up --dir %s`", ErrNotRunning, dir, dir)
	}
	if err != nil {
		return nil, fmt.Errorf("read sandbox state: %w", err)
	}
	c := &Cluster{Dir: abs, log: log}
	if err := json.Unmarshal(b, c); err != nil {
		return nil, fmt.Errorf("parse %s: %w", filepath.Join(abs, stateFile), err)
	}
	if len(c.Nodes) == 0 {
		return nil, fmt.Errorf("%w in %s: the state file lists no nodes", ErrNotRunning, dir)
	}
	return c, nil
}

// Up creates (when new) and starts the sandbox described by cfg. An existing
// sandbox in cfg.Dir is started as it is; cfg.Workers then only adds workers
// when it asks for more than exist.
func Up(ctx context.Context, cfg Config) (*Cluster, error) {
	if cfg.Workers < 1 {
		return nil, fmt.Errorf("%w: --nodes must be at least 1 (the number of workers besides the coordinator), got %d", ErrBadConfig, cfg.Workers)
	}
	if cfg.BasePort < 0 || cfg.BasePort > 65535-cfg.Workers-8 {
		return nil, fmt.Errorf("%w: --port must be between 1024 and %d, got %d", ErrBadConfig, 65535-cfg.Workers-8, cfg.BasePort)
	}
	if cfg.Dir == "" {
		cfg.Dir = DefaultConfig().Dir
	}
	log := cfg.Logger
	if log == nil {
		log = zap.NewNop()
	}
	c, err := Open(cfg.Dir, log)
	switch {
	case err == nil:
		if cfg.BinDir != "" {
			c.BinDir = cfg.BinDir
		}
		if cfg.Citus && !c.Citus {
			return nil, fmt.Errorf("%w: the sandbox in %s is a plain PostgreSQL (compat) cluster; delete it with `shardmover sandbox down --purge --dir %s` before starting a Citus sandbox there", ErrBadConfig, cfg.Dir, cfg.Dir)
		}
	case errors.Is(err, ErrNotRunning):
		bin, err := FindBinDir(cfg.BinDir)
		if err != nil {
			return nil, err
		}
		abs, err := filepath.Abs(cfg.Dir)
		if err != nil {
			return nil, err
		}
		c = &Cluster{Dir: abs, BinDir: bin, Settings: cfg.Settings, FreePorts: cfg.BasePort == 0, Citus: cfg.Citus, log: log}
	default:
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(c.BinDir, "pg_ctl")); err != nil {
		return nil, ErrNoBinaries
	}
	if c.Citus {
		if err := CitusAvailable(c.BinDir); err != nil {
			return nil, err
		}
	}
	// Plan the nodes that must exist.
	want := cfg.Workers + 1
	if len(c.Nodes) > want {
		want = len(c.Nodes)
	}
	for i := len(c.Nodes); i < want; i++ {
		port, err := c.pickPort(cfg.BasePort, i)
		if err != nil {
			c.releasePorts()
			return nil, err
		}
		name := "coordinator"
		if i > 0 {
			name = fmt.Sprintf("worker%d", i)
		}
		c.Nodes = append(c.Nodes, Node{Name: name, Host: "127.0.0.1", Port: port, DataDir: filepath.Join(c.Dir, name)})
	}
	// Check ports before touching anything, so a busy port changes nothing.
	for _, n := range c.Nodes {
		if err := c.checkPort(ctx, n); err != nil {
			c.releasePorts()
			return nil, err
		}
	}
	if err := c.prepareDir(); err != nil {
		c.releasePorts()
		return nil, err
	}
	if err := c.save(); err != nil {
		c.releasePorts()
		return nil, err
	}
	for i := range c.Nodes {
		if err := c.startNodeAt(ctx, i); err != nil {
			c.releasePorts()
			return nil, err
		}
	}
	if c.Citus {
		if err := c.setupCitus(ctx); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// startNodeAt starts node i. With FreePorts, a port some other program
// bound after it was reserved is replaced by a fresh one, a few times.
func (c *Cluster) startNodeAt(ctx context.Context, i int) error {
	for attempt := 1; ; attempt++ {
		c.mu.Lock()
		n := c.Nodes[i]
		c.mu.Unlock()
		err := c.startNode(ctx, n)
		if err == nil || !c.FreePorts || attempt == 5 || !errors.Is(err, errBind) {
			return err
		}
		port, perr := c.pickPort(0, i)
		if perr != nil {
			return errors.Join(err, perr)
		}
		c.log.Info("port taken at start, moving node", zap.String("node", n.Name), zap.Int("from", n.Port), zap.Int("to", port))
		ReleasePorts(n.Port)
		c.mu.Lock()
		c.Nodes[i].Port = port
		serr := c.save()
		c.mu.Unlock()
		if serr != nil {
			return serr
		}
	}
}

// releasePorts gives back the reservations of a free-port cluster.
func (c *Cluster) releasePorts() {
	if !c.FreePorts {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.Nodes {
		ReleasePorts(n.Port)
	}
}

// AddNode initialises and starts one more worker and returns it. On a Citus
// sandbox the worker also gets the extension and is added to the cluster
// with citus_add_node (which syncs the metadata to it).
func (c *Cluster) AddNode(ctx context.Context) (Node, error) {
	c.mu.Lock()
	base := 0
	if !c.FreePorts && len(c.Nodes) > 0 {
		base = c.Nodes[0].Port
	}
	i := len(c.Nodes)
	c.mu.Unlock()
	port, err := c.pickPort(base, i)
	if err != nil {
		return Node{}, err
	}
	// With fixed ports the next port may be taken by something else: move on.
	if base != 0 {
		for tries := 0; tries < 64; tries++ {
			if err := c.checkPort(ctx, Node{Host: "127.0.0.1", Port: port}); err == nil {
				break
			}
			port++
		}
	}
	n := Node{Name: fmt.Sprintf("worker%d", i), Host: "127.0.0.1", Port: port, DataDir: filepath.Join(c.Dir, fmt.Sprintf("worker%d", i))}
	if err := c.checkPort(ctx, n); err != nil {
		if c.FreePorts {
			ReleasePorts(port)
		}
		return Node{}, err
	}
	c.mu.Lock()
	c.Nodes = append(c.Nodes, n)
	err = c.save()
	c.mu.Unlock()
	if err != nil {
		return Node{}, err
	}
	if err := c.startNodeAt(ctx, i); err != nil {
		return Node{}, err
	}
	c.mu.Lock()
	n = c.Nodes[i]
	c.mu.Unlock()
	if c.Citus {
		if err := c.setupCitus(ctx); err != nil {
			return n, err
		}
	}
	return n, nil
}

// Down stops every server (fast shutdown). With purge it also deletes Dir.
func (c *Cluster) Down(ctx context.Context, purge bool) error {
	var errs []error
	for _, n := range c.Nodes {
		if err := c.StopNode(ctx, n, "fast"); err != nil {
			errs = append(errs, err)
		}
	}
	c.releasePorts()
	if purge {
		if err := os.RemoveAll(c.Dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// StopNode stops one server with the given pg_ctl mode ("fast", "immediate").
// Stopping a stopped server is not an error.
func (c *Cluster) StopNode(ctx context.Context, n Node, mode string) error {
	if !c.running(ctx, n) {
		return nil
	}
	out, err := c.pgctl(ctx, "stop", "-D", n.DataDir, "-m", mode, "-w", "-t", "60")
	if err != nil && c.running(ctx, n) {
		return fmt.Errorf("stop %s (%s): %v: %s", n.Name, n.Addr(), err, lastLines(out, 5))
	}
	return nil
}

// NodeStatus is one line of Status.
type NodeStatus struct {
	Node
	Running bool `json:"running"`
}

// Status reports whether each node's server is running.
func (c *Cluster) Status(ctx context.Context) []NodeStatus {
	out := make([]NodeStatus, 0, len(c.Nodes))
	for _, n := range c.Nodes {
		out = append(out, NodeStatus{Node: n, Running: c.running(ctx, n)})
	}
	return out
}

// FindBinDir locates the PostgreSQL server binaries. An explicit folder, or
// $PG_BINDIR, is authoritative: when it lacks the binaries the answer is
// ErrNoBinaries, never a silent fallback to another version.
func FindBinDir(explicit string) (string, error) {
	ok := func(dir string) bool {
		return fileExists(filepath.Join(dir, "initdb")) && fileExists(filepath.Join(dir, "pg_ctl")) && fileExists(filepath.Join(dir, "postgres"))
	}
	for _, dir := range []string{explicit, os.Getenv("PG_BINDIR")} {
		if dir == "" {
			continue
		}
		if ok(dir) {
			return dir, nil
		}
		return "", fmt.Errorf("%w (looked in %s)", ErrNoBinaries, dir)
	}
	var candidates []string
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		candidates = append(candidates, strings.TrimSpace(string(out)))
	}
	if matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin"); len(matches) > 0 {
		// Newest version first.
		sort.Slice(matches, func(i, j int) bool { return versionOf(matches[i]) > versionOf(matches[j]) })
		candidates = append(candidates, matches...)
	}
	for _, dir := range candidates {
		if ok(dir) {
			return dir, nil
		}
	}
	return "", ErrNoBinaries
}

func versionOf(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

// prepareDir creates Dir so the postgres OS user can reach its data dirs.
func (c *Cluster) prepareDir() error {
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return fmt.Errorf("create sandbox dir: %w", err)
	}
	if os.Geteuid() == 0 {
		// The servers run as postgres: every parent must be traversable.
		for d := c.Dir; d != "/" && d != "."; d = filepath.Dir(d) {
			st, err := os.Stat(d)
			if err != nil {
				return err
			}
			if st.Mode().Perm()&0o001 == 0 {
				if err := os.Chmod(d, st.Mode().Perm()|0o011); err != nil {
					return fmt.Errorf("make %s traversable for the postgres user: %w", d, err)
				}
			}
		}
	}
	return nil
}

func (c *Cluster) save() error {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(c.Dir, stateFile+".tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("write sandbox state: %w", err)
	}
	return os.Rename(tmp, filepath.Join(c.Dir, stateFile))
}

func (c *Cluster) pickPort(base, i int) (int, error) {
	if base != 0 {
		return base + i, nil
	}
	port, err := ReservePorts(1)
	if err != nil {
		return 0, fmt.Errorf("pick a free port: %w", err)
	}
	return port, nil
}

// checkPort fails when the node's port is taken by anything but the node's
// own running server.
func (c *Cluster) checkPort(ctx context.Context, n Node) error {
	if n.DataDir != "" && c.running(ctx, n) {
		return nil
	}
	l, err := net.Listen("tcp", n.Addr())
	if err != nil {
		return fmt.Errorf("%w: %s is already in use by another program; stop it or choose other ports with --port", ErrPortInUse, n.Addr())
	}
	return l.Close()
}

func (c *Cluster) running(ctx context.Context, n Node) bool {
	if !fileExists(filepath.Join(n.DataDir, "PG_VERSION")) {
		return false
	}
	_, err := c.pgctl(ctx, "status", "-D", n.DataDir)
	return err == nil
}

func (c *Cluster) startNode(ctx context.Context, n Node) error {
	log := c.log.With(zap.String("node", n.Name), zap.String("addr", n.Addr()))
	if c.running(ctx, n) {
		log.Debug("node already running")
		return nil
	}
	if !fileExists(filepath.Join(n.DataDir, "PG_VERSION")) {
		log.Info("initialising node")
		if err := c.initNode(ctx, n); err != nil {
			return err
		}
	}
	// A crash leaves postmaster.pid behind; the server is not running (checked
	// above), so the file is stale.
	_ = os.Remove(filepath.Join(n.DataDir, "postmaster.pid"))
	if err := c.writeConf(n); err != nil {
		return err
	}
	logFile := filepath.Join(n.DataDir, "server.log")
	var logStart int64
	if st, err := os.Stat(logFile); err == nil {
		logStart = st.Size()
	}
	out, err := c.pgctl(ctx, "start", "-D", n.DataDir, "-l", logFile, "-w", "-t", "60")
	if err != nil {
		tail, _ := os.ReadFile(logFile)
		if int64(len(tail)) >= logStart {
			tail = tail[logStart:] // only this attempt's lines
		}
		if strings.Contains(string(tail), "could not bind") || strings.Contains(string(tail), "Address already in use") {
			err = fmt.Errorf("%w: %v", errBind, err)
		}
		return fmt.Errorf("start %s on %s: %w: %s %s", n.Name, n.Addr(), err, lastLines(out, 3), lastLines(string(tail), 5))
	}
	log.Info("node started")
	return nil
}

// initNode makes the node's data directory: a copy of the initdb template
// with the sandbox's pg_hba.conf, put together beside it and renamed into
// place, so a copy cut short is never taken for a data directory.
func (c *Cluster) initNode(ctx context.Context, n Node) error {
	tmpl, err := c.templateDir(ctx)
	if err != nil {
		return fmt.Errorf("initialise %s: %w", n.Name, err)
	}
	staging := n.DataDir + ".init"
	if err := os.RemoveAll(staging); err != nil {
		return err
	}
	if err := os.MkdirAll(staging, 0o700); err != nil {
		return err
	}
	if err := c.chown(staging); err != nil {
		return err
	}
	if err := c.copyDataDir(tmpl, staging); err != nil {
		return fmt.Errorf("initialise %s from %s: %w", n.Name, tmpl, err)
	}
	hba := "# sandbox: loopback only, trusted\nhost all all 127.0.0.1/32 trust\nhost replication all 127.0.0.1/32 trust\n"
	if err := os.WriteFile(filepath.Join(staging, "pg_hba.conf"), []byte(hba), 0o600); err != nil {
		return err
	}
	if err := c.chown(filepath.Join(staging, "pg_hba.conf")); err != nil {
		return err
	}
	_ = os.Remove(n.DataDir) // an empty directory only; anything else makes the rename fail
	return os.Rename(staging, n.DataDir)
}

// writeConf (re)writes the sandbox's settings, included from postgresql.conf.
func (c *Cluster) writeConf(n Node) error {
	settings := map[string]string{
		"listen_addresses":          "'127.0.0.1'",
		"port":                      strconv.Itoa(n.Port),
		"unix_socket_directories":   "''",
		"wal_level":                 "logical",
		"max_replication_slots":     "32",
		"max_wal_senders":           "32",
		"max_prepared_transactions": "32",
		"max_connections":           "200",
		"shared_buffers":            "128MB",
		"fsync":                     "off",
		"synchronous_commit":        "off",
		"full_page_writes":          "off",
		"max_wal_size":              "2GB",
		"wal_sender_timeout":        "60s",
		"logging_collector":         "off",
		"log_min_messages":          "warning",
	}
	if c.Citus {
		for k, v := range citusSettings {
			settings[k] = v
		}
	}
	for k, v := range c.Settings {
		settings[k] = v
	}
	if c.Citus {
		settings["shared_preload_libraries"] = withCitusFirst(settings["shared_preload_libraries"])
	}
	keys := make([]string, 0, len(settings))
	for k := range settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString("# written by shardmover sandbox on every start\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "%s = %s\n", k, settings[k])
	}
	p := filepath.Join(n.DataDir, "sandbox.conf")
	if err := os.WriteFile(p, []byte(b.String()), 0o600); err != nil {
		return err
	}
	if err := c.chown(p); err != nil {
		return err
	}
	main := filepath.Join(n.DataDir, "postgresql.conf")
	body, err := os.ReadFile(main)
	if err != nil {
		return err
	}
	if !strings.Contains(string(body), "include_if_exists = 'sandbox.conf'") {
		body = append(body, []byte("\ninclude_if_exists = 'sandbox.conf'\n")...)
		if err := os.WriteFile(main, body, 0o600); err != nil {
			return err
		}
	}
	return nil
}

func (c *Cluster) pgctl(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(c.BinDir, "pg_ctl"), args...)
	c.asPostgres(cmd)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// asPostgres makes cmd run as the postgres OS user when we are root.
func (c *Cluster) asPostgres(cmd *exec.Cmd) {
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	if os.Geteuid() != 0 {
		return
	}
	uid, gid, err := postgresIDs()
	if err != nil {
		return
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid}, Setpgid: true}
	cmd.Dir = "/"
}

func (c *Cluster) chown(p string) error {
	if os.Geteuid() != 0 {
		return nil
	}
	uid, gid, err := postgresIDs()
	if err != nil {
		return err
	}
	return os.Chown(p, int(uid), int(gid))
}

func postgresIDs() (uint32, uint32, error) {
	u, err := user.Lookup("postgres")
	if err != nil {
		return 0, 0, fmt.Errorf("running as root needs the unprivileged postgres OS user to run servers: %w (apt-get install postgresql-15 creates it)", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return uint32(uid), uint32(gid), nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// WaitReady waits until every node accepts TCP connections.
func (c *Cluster) WaitReady(ctx context.Context) error {
	for _, n := range c.Nodes {
		for {
			conn, err := net.DialTimeout("tcp", n.Addr(), time.Second)
			if err == nil {
				conn.Close()
				break
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return nil
}
