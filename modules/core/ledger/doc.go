// Package ledger is hookledger's core: the event ledger and the path from a
// verified delivery to settled business state.
//
// It owns the webhook_event table (ent/schema/webhook_event.go), the
// delivery counts in delivery_stat (ent/schema/delivery_stat.go, written by
// DeliveryStats for every receiver: NewDeliveryStats, StatReplayed,
// StatWouldSkip, StatForbidden, StatLateClaim, StatMismatch, SecretOutcome
// and SecretTally) and the job kinds apply_event,
// apply_batch and prune_ledger. Its statements on River's river_job table
// are all in river.go.
//
//   - Claim: Store.Claim (NewStore, StoreOptions) inserts the ledger row
//     (a Claim, named by its EventKey) with INSERT ... ON CONFLICT DO
//     NOTHING RETURNING and the River job that applies it, in one
//     statement (under log-only, or traced, in one transaction), and says
//     what it did (ClaimResult: claimed, a duplicate, or a duplicate
//     applied again under CLAIM_MODE=log-only, which only the Store
//     decides); Batcher (NewBatcher) gathers concurrent deliveries into one
//     such claim (group commit). CheckPayload refuses, before the claim,
//     a body jsonb would refuse (ErrUnstorable); IsBadData and
//     IsUnavailable tell a delivery's bad data from an outage. The claim is
//     the design card's ent upsert-do-nothing written as one SQL statement
//     for one row or many (ClaimStatement, which the benchmark's batched
//     ceiling runs too): ent's bulk Create().OnConflict().DoNothing() maps
//     the ids RETURNING yields to its builders by position (sqlgraph's
//     insertLastIDs), and DO NOTHING yields fewer than there are builders,
//     so it cannot say which deliveries of a batch were duplicates; a
//     multi-row VALUES from ent's SQL builder could, but would be another
//     statement, prepared again on every connection, for each batch size.
//     INSERT ... SELECT FROM unnest(...) RETURNING namespace, event_id is
//     one statement for any size. Payloads (NewPayloads) keeps what the
//     claims stored for their apply; Sealer (NewSealer, CheckSealer and
//     SealerCheck, Sealed, KeyID) encrypts stored payloads (PAYLOAD_KEYS);
//     CheckSealed (SealedCheck, UnreadablePayload) lists those no key
//     opens, which erase and Rekey (RekeyReport) pass by.
//   - Apply: one loop (Applier) behind the apply_event and apply_batch jobs
//     (ApplyArgs, ApplyBatchArgs; ApplyWorker, ApplyBatchWorker, which
//     NewRiver adds with RiverOptions) settles the ledger rows, runs the
//     handlers (HandlerFunc, given the Event) a Registry maps to each event's provider and
//     type, makes the writes they staged in a Write, and completes River's
//     job, all in one transaction, in ordered steps; a failure then takes
//     one path whatever its cause, decided in one place after the steps
//     (worker.go): recorded on the row (RecordFailure, Attempt,
//     Failure) and returned to River as the job's error (a HandlerError,
//     PanicError or Permanent one), which River retries by its policy
//     (RetryDelay; the handler's), snoozed (the database's), handed back
//     (shutdown), with a failed batch split into one job per event. An
//     event whose type has a PrepareFunc (Registry.Prepare: a call to
//     another service) is applied in a job of its own, which runs it
//     before the transaction, outside any lock. Apply is the same apply
//     inside a caller's transaction, with an Outcome.
//   - Write: a module's staged write (NewWrite, WriteFuncs, Entry):
//     handlers Put values, and the apply, or InTx and InTxWithJobs before
//     they commit, folds and flushes them once per transaction, in key
//     order, under locks every transaction takes in one order. Tx is the
//     transaction handlers get, with an ent client and River's inserts
//     (Tx.InsertJob, Tx.InsertJobs, through a JobInserter).
//   - Operate: the Store's Find, List (Filter, ValidStatus), Search,
//     FindJob and FindJobs (Job), StoredPayloads, StoredBodies (StoredBody), Requeue (which targets
//     the event, never a shared batch job; RequeueResult), RequeueMatching
//     (RequeueCounts), Discard, Prune (Retention, PruneReport, PruneArgs,
//     PruneWorker, PrunePeriodically), Erase and EraseModules (EraseFunc,
//     registered with Registry.Erase, RedactRows for a hook that redacts a column; EraseReport, EraseMatch,
//     ModuleErasure, Holds, Erased, ErasedPayload), Rekey, CountByStatus, Backlog,
//     DeliveryCounts and DeliverySeries (DeliveryCount, DeliveryPoint),
//     and the Prometheus Collector
//     (NewCollector) serve the admin API, the console and the CLI.
//     Identity and RenewIdentity name the ledger for Redis markers;
//     SlogLogger (NewThrottleHandler, ThrottleHandler) bridges River's
//     logs to zap.
//
// Expected outcomes are sentinel errors, checked with errors.Is:
// ErrNotFound, ErrAmbiguous, ErrSettled, ErrErased, ErrBeingApplied,
// ErrNotDiscardable, ErrNoReason, ErrEventGone, ErrIncomplete,
// ErrPayloadKey, ErrPayloadCorrupt and ErrUnstorable; IsPermanent tells a Permanent failure.
// The tuning constants (ApplyMaxAttempts, ApplyTimeout,
// RescueStuckJobsAfter, RetryHorizon, FetchCooldown, FetchPollInterval,
// PayloadsBytes, PayloadsAge, ExactSettledBelow, ListScanLimit, PruneBatch,
// StatFlushInterval, LogThrottleInterval, PayloadKeySize) say their reasons
// where they are defined.
//
// Statuses are ent's constants (webhookevent.StatusClaimed ...). processing
// stays a valid status and filter value, but the apply transaction marks
// rows settled directly, so no session ever sees it: no count includes it,
// and the backlog (admin stats, the console, every /metrics scrape) names
// only claimed and failed, which the partial index webhookevent_pending holds.
// discarded rows (Discard) are out of the backlog, counted through their own
// partial index.
//
// Modules register their handlers, workers (AddWorker) and periodic jobs in
// a Registry (NewRegistry), which NewRiver only reads, failing on a
// registration that went wrong. A handler inserts its jobs through the
// apply's Tx (Tx.InsertJob), which ent and River share.
package ledger
