package ledger

import (
	"encoding/json"
	"slices"

	"github.com/riverqueue/river/rivertype"
)

// Under load, the claim enqueues a job every few milliseconds (one per
// group commit), and River hands jobs to workers at most once per
// FetchCooldown, so jobs wait. A claim's job absorbs the claims' jobs
// waiting beside it: in its own transaction it locks them (skipping any
// that River or another apply has locked), marks them completed and
// applies their events with its own. The waiting jobs never run; their
// events settle, and they complete, when the absorbing transaction
// commits, and not at all when it rolls back. River's per-job work (its
// fetch, the job's transaction, its completion) and the apply's per-
// transaction statements are then paid once for many claim batches.
//
// Only a claim's jobs absorb and are absorbed (apply_batch, and
// apply_event marked fresh), and only while they never ran: a split's,
// a requeue's and a retry's jobs run alone, with their own events.
// The apply takes them with absorbSQL and a failed apply's split takes
// them back with reabsorbSQL (river.go).

// absorbEvents is the most events a job takes into its transaction, its
// own and those of the jobs it absorbs.
const absorbEvents = 256

// maxAbsorbedJobs bounds the jobs one apply considers absorbing.
const maxAbsorbedJobs = 31

// mayAbsorb reports whether a claim's job absorbs others: on its first
// run only. A job that runs again (a retry, a rescue, a snooze, a requeue,
// which starts its attempts from 0 again) runs with its own events, so an
// event that keeps failing never takes others into its failures. River
// adds its client to attempted_by at every run: one entry is a first run.
func mayAbsorb(job *rivertype.JobRow) bool {
	if job.Attempt != 1 || len(job.Errors) > 0 || len(job.AttemptedBy) > 1 {
		return false
	}
	var m struct {
		Snoozes int `json:"snoozes"`
	}
	return json.Unmarshal(job.Metadata, &m) != nil || m.Snoozes == 0
}

// absorbedJob is a job an apply absorbed, and its events.
type absorbedJob struct {
	id     int64
	events []EventKey
}

// ids returns the jobs' ids.
func ids(jobs []absorbedJob) []int64 {
	out := make([]int64, len(jobs))
	for i, j := range jobs {
		out[i] = j.id
	}
	return out
}

// events returns the jobs' events.
func events(jobs []absorbedJob) []EventKey {
	var out []EventKey
	for _, j := range jobs {
		out = append(out, j.events...)
	}
	return out
}

// retake returns the absorbed jobs a failed apply's split takes back: the
// one that holds the failing event, when the failure is one absorbed
// event's; none when it is one of the job's own events; all of them when
// it is no one event's. The others rolled back with the apply and wait,
// to run, or be absorbed, whole.
func retake(jobs []absorbedJob, own []EventKey, failed EventKey) []int64 {
	if failed == (EventKey{}) {
		return ids(jobs)
	}
	if slices.Contains(own, failed) {
		return nil
	}
	for _, j := range jobs {
		if slices.Contains(j.events, failed) {
			return []int64{j.id}
		}
	}
	return nil
}

// mergeKeys returns own and more as one set in key order: an event is
// applied once however many jobs carry it.
func mergeKeys(own, more []EventKey) []EventKey {
	if len(more) == 0 {
		return own
	}
	all := append(append(make([]EventKey, 0, len(own)+len(more)), own...), more...)
	slices.SortFunc(all, EventKey.compare)
	return slices.Compact(all)
}
