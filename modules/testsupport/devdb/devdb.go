// Package devdb finds a PostgreSQL server for development and tests: the URL
// the caller was given, else a server already listening locally, else a
// throwaway cluster started from the installed PostgreSQL binaries with its
// data in a git-ignored folder of the project. It never stops or reconfigures
// a server it did not start.
package devdb

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookledger/hookledger/config"
)

// Port is where a throwaway cluster listens.
const Port = 54329

// localCandidates are the servers tried when no URL is given.
var localCandidates = []string{
	"postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable",
	"postgres://postgres@/postgres?host=/var/run/postgresql&sslmode=disable",
}

// Server resolves an admin URL (one that may create databases). explicit
// wins when non-empty; logf reports what was chosen.
func Server(ctx context.Context, explicit string, logf func(format string, args ...any)) (string, error) {
	if explicit != "" {
		if err := ping(ctx, explicit); err != nil {
			return "", fmt.Errorf("database %s: %w", config.RedactURL(explicit), err)
		}
		return explicit, nil
	}
	candidates := append([]string{}, localCandidates...)
	if u, err := user.Current(); err == nil && u.Username != "postgres" {
		candidates = append(candidates, "postgres://"+url.PathEscape(u.Username)+"@/postgres?host=/var/run/postgresql&sslmode=disable")
	}
	for _, c := range candidates {
		if ping(ctx, c) == nil {
			return c, nil
		}
	}
	u, err := startThrowaway(ctx, logf)
	if err != nil {
		return "", err
	}
	return u, nil
}

// EnsureDatabase creates database name on the server at adminURL when it
// does not exist, and returns a URL for it.
func EnsureDatabase(ctx context.Context, adminURL, name string) (string, error) {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return "", fmt.Errorf("connect %s: %w", config.RedactURL(adminURL), err)
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		return "", fmt.Errorf("look up database %s: %w", name, err)
	}
	if !exists {
		if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
			var exists bool
			if qerr := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); qerr != nil || !exists {
				return "", fmt.Errorf("create database %s: %w", name, err)
			}
		}
	}
	return WithDatabase(adminURL, name)
}

// WithDatabase returns rawURL pointing at database name.
func WithDatabase(rawURL, name string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", fmt.Errorf("parse database url: %w", err)
	}
	u.Path = "/" + name
	return u.String(), nil
}

func ping(ctx context.Context, rawURL string) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, rawURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	return conn.Ping(ctx)
}

// startThrowaway starts (or reuses) the project-local cluster.
func startThrowaway(ctx context.Context, logf func(string, ...any)) (string, error) {
	dir, err := dataDir()
	if err != nil {
		return "", err
	}
	c, err := NewCluster(dir, Port)
	if err != nil {
		return "", err
	}
	unlock, err := lockFile(dir + ".lock")
	if err != nil {
		return "", err
	}
	defer unlock()
	if ping(ctx, c.URL()) == nil {
		return c.URL(), nil
	}
	if !c.Initialized() {
		logf("devdb: initialising a throwaway PostgreSQL cluster in %s", dir)
		if err := c.Init(ctx); err != nil {
			return "", err
		}
	}
	logf("devdb: starting the throwaway PostgreSQL on 127.0.0.1:%d", Port)
	if err := c.Start(ctx); err != nil {
		return "", err
	}
	return c.URL(), nil
}

// Cluster is a PostgreSQL cluster of hookledger's own, run from the
// installed server binaries: the dev fallback, and the database that fault
// tests stop and start at will.
type Cluster struct {
	Dir  string
	Port int
	bin  string
}

// NewCluster describes a cluster with its data in dir, listening on
// 127.0.0.1:port.
func NewCluster(dir string, port int) (*Cluster, error) {
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	return &Cluster{Dir: dir, Port: port, bin: bin}, nil
}

// URL is the cluster's maintenance database.
func (c *Cluster) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", c.Port)
}

// Initialized reports whether Init has run on Dir.
func (c *Cluster) Initialized() bool {
	_, err := os.Stat(filepath.Join(c.Dir, "PG_VERSION"))
	return err == nil
}

// Init creates the cluster with trust authentication. As root it runs
// initdb as the postgres user, which then owns Dir.
func (c *Cluster) Init(ctx context.Context) error {
	if err := os.MkdirAll(c.Dir, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", c.Dir, err)
	}
	if os.Geteuid() == 0 {
		if err := chownPostgres(c.Dir); err != nil {
			return err
		}
	}
	return c.run(ctx, "initdb", "-D", c.Dir, "-U", "postgres", "--auth=trust", "--encoding=UTF8", "--no-sync")
}

// Start starts the server and waits until it accepts connections.
func (c *Cluster) Start(ctx context.Context) error {
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=300", c.Port, c.Dir)
	if err := c.run(ctx, "pg_ctl", "-D", c.Dir, "-l", filepath.Join(c.Dir, "server.log"), "-o", opts, "-w", "start"); err != nil {
		return fmt.Errorf("start PostgreSQL in %s: %w", c.Dir, err)
	}
	if err := ping(ctx, c.URL()); err != nil {
		return fmt.Errorf("PostgreSQL in %s started but does not answer: %w", c.Dir, err)
	}
	return nil
}

// Stop stops the server; mode "immediate" is an abrupt stop, as a crash.
func (c *Cluster) Stop(ctx context.Context, mode string) error {
	return c.run(ctx, "pg_ctl", "-D", c.Dir, "-m", mode, "-w", "stop")
}

func (c *Cluster) run(ctx context.Context, name string, args ...string) error {
	cmdArgs := append([]string{filepath.Join(c.bin, name)}, args...)
	if os.Geteuid() == 0 {
		cmdArgs = append([]string{"runuser", "-u", "postgres", "--"}, cmdArgs...)
	}
	out, err := exec.CommandContext(ctx, cmdArgs[0], cmdArgs[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w\n%s", strings.Join(cmdArgs, " "), err, out)
	}
	return nil
}

// binDir finds the PostgreSQL server binaries.
func binDir() (string, error) {
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		if _, err := os.Stat(filepath.Join(filepath.Dir(p), "initdb")); err == nil {
			return filepath.Dir(p), nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return versionOf(dirs[i]) > versionOf(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "pg_ctl")); err == nil {
			return d, nil
		}
	}
	return "", errors.New("no PostgreSQL server reachable and no PostgreSQL server binaries (initdb, pg_ctl) found: " +
		"install PostgreSQL (Debian/Ubuntu: apt-get install postgresql; macOS: brew install postgresql) " +
		"or set DATABASE_URL / TEST_DATABASE_URL")
}

func versionOf(dir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
	return v
}

// dataDir is .pgdata at the project root. As root the server must run as the
// postgres user, which cannot always reach the project (a home folder of mode
// 700): then the data lives in a folder of the system's temporary directory
// named after the project path.
func dataDir() (string, error) {
	root, err := projectRoot()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(root, ".pgdata")
	if os.Geteuid() != 0 || reachableByPostgres(root) {
		return dir, nil
	}
	sum := sha256.Sum256([]byte(root))
	return filepath.Join(os.TempDir(), "hookledger-pgdata-"+hex.EncodeToString(sum[:6])), nil
}

func reachableByPostgres(dir string) bool {
	return exec.Command("runuser", "-u", "postgres", "--", "test", "-x", dir).Run() == nil
}

// projectRoot walks up from the working directory to go.mod.
func projectRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return dir, nil
		}
	}
}

func chownPostgres(dir string) error {
	u, err := user.Lookup("postgres")
	if err != nil {
		return fmt.Errorf("running as root needs a postgres system user to own the throwaway cluster: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(dir, uid, gid); err != nil {
		return fmt.Errorf("chown %s: %w", dir, err)
	}
	return nil
}

// lockFile serialises concurrent starters (parallel test packages).
func lockFile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}

// DropDatabase drops database name, closing its remaining connections.
func DropDatabase(ctx context.Context, adminURL, name string) error {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return fmt.Errorf("connect %s: %w", config.RedactURL(adminURL), err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	return nil
}
