package ledger

import (
	"context"
	"fmt"
)

// StoredPayloads returns the stored bodies of the events of keys that the
// ledger holds, by key; a key it does not hold is left out.
func (s *Store) StoredPayloads(ctx context.Context, keys []EventKey) (map[EventKey][]byte, error) {
	namespaces, ids := make([]string, len(keys)), make([]string, len(keys))
	for i, k := range keys {
		namespaces[i], ids[i] = k.Namespace, k.EventID
	}
	rows, err := s.db.QueryContext(ctx, `
		SELECT namespace, event_id, payload FROM webhook_event
		WHERE (namespace, event_id) IN (SELECT * FROM unnest($1::text[], $2::text[]))`, namespaces, ids)
	if err != nil {
		return nil, fmt.Errorf("stored payloads: %w", err)
	}
	defer rows.Close()
	out := make(map[EventKey][]byte, len(keys))
	for rows.Next() {
		var (
			k EventKey
			p []byte
		)
		if err := rows.Scan(&k.Namespace, &k.EventID, &p); err != nil {
			return nil, fmt.Errorf("stored payloads: %w", err)
		}
		if out[k], err = s.sealer.Open(k, p); err != nil {
			return nil, err
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("stored payloads: %w", err)
	}
	return out, nil
}
