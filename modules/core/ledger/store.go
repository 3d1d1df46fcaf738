package ledger

import (
	"database/sql"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/hookledger/hookledger/ent"
)

// Store is the ledger: the database (through database/sql and through ent,
// and the claim through pgx itself), the River clients that enqueue and
// retry apply jobs, and the claim mode. Every operation on webhook_event is one of its methods; the
// receiver, replay, the admin API, the console and the CLI each depend on
// a small interface of the methods they use, declared where they use it.
type Store struct {
	db   *sql.DB
	ent  *ent.Client
	jobs *river.Client[*sql.Tx]
	// claimJobs inserts the claim's apply jobs (Store.claim).
	claimJobs *river.Client[pgx.Tx]
	// logOnly applies duplicates again (CLAIM_MODE=log-only). It is the
	// one place the claim mode is decided: ClaimResult tells the receiver.
	logOnly bool
	// payloads keeps what the claim inserted for the apply (Payloads).
	payloads *Payloads
	// jobsInStatement inserts the claim's apply job in the claim's own
	// statement (claimWithJobSQL), and insertNotice paces the notices it
	// sends the workers.
	jobsInStatement bool
	insertNotice    notice
	// sealer seals the payloads it stores and opens those it reads
	// (PAYLOAD_KEYS); nil stores plaintext.
	sealer *Sealer
}

// StoreOptions are a Store's settings.
type StoreOptions struct {
	// LogOnly is CLAIM_MODE=log-only: duplicates are applied again.
	LogOnly bool
	// Middleware wraps the claim's job inserts, as RiverOptions.Middleware
	// wraps the River client's (tracing).
	Middleware []rivertype.Middleware
	// Payloads, when set, keeps the payloads of the events the claim
	// inserted for their apply in this process (RiverOptions.Payloads).
	Payloads *Payloads
	// Sealer, when set, encrypts payloads at rest (PAYLOAD_KEYS).
	Sealer *Sealer
}

// NewStore is the ledger on db, whose apply jobs jobs inserts: a client
// with workers, or an insert-only one for the CLI.
func NewStore(db *sql.DB, jobs *river.Client[*sql.Tx], o StoreOptions) *Store {
	return &Store{db: db, ent: entClient(db), jobs: jobs, claimJobs: newClaimInserter(o.Middleware), logOnly: o.LogOnly,
		payloads: o.Payloads, jobsInStatement: !o.LogOnly && len(o.Middleware) == 0, sealer: o.Sealer}
}

// notice paces River's insert notices as River's client does: a claim
// notifies unless a notice went out within FetchCooldown, since the
// workers fetch at most that often. Claims in flight together may each
// notify (with group commit, one per committer); a claim that inserted
// nothing sent none, and does not count.
type notice struct {
	last atomic.Int64 // noticeClock when the last notice went out; 0 for none
}

// noticeEpoch and noticeClock time notices on Go's monotonic clock, which
// a step of the wall clock does not move.
var noticeEpoch = time.Now()

func noticeClock() time.Duration { return time.Since(noticeEpoch) }

// due reports whether a claim starting at now should notify.
func (n *notice) due(now time.Duration) bool {
	last := n.last.Load()
	return last == 0 || now-time.Duration(last) >= FetchCooldown
}

// sent records a notice that went out with a claim that started at at.
func (n *notice) sent(at time.Duration) {
	for {
		last := n.last.Load()
		if int64(at) <= last || n.last.CompareAndSwap(last, int64(at)) {
			return
		}
	}
}
