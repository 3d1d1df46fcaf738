package drift

import (
	"context"
	"database/sql"
	"fmt"
)

// RowQuery is how a module's stored rows are read with SQL: Select is the
// statement up to its WHERE clause's own conditions, with the namespace as
// $1 ("SELECT external_id, status, version, event_id FROM invoice WHERE
// namespace = $1 AND provider = 'stripe'"); ID is the column of the
// provider's id, Updated the column of when the row was last written;
// Scan reads one row of the statement.
type RowQuery struct {
	Select      string
	ID, Updated string
	Scan        func(*sql.Rows) (Row, error)
}

// ReadRows reads the rows sel names with q: those with its ids, or a page
// of rows written since sel.Since, in id order (byte by byte, as the
// check pages the provider's ids). what names the rows in errors.
func ReadRows(ctx context.Context, db *sql.DB, sel Selection, q RowQuery, what string) ([]Row, error) {
	var (
		rows *sql.Rows
		err  error
	)
	switch {
	case sel.IDs != nil && len(sel.IDs) == 0:
		return nil, nil
	case sel.IDs != nil:
		rows, err = db.QueryContext(ctx, q.Select+` AND `+q.ID+` = ANY($2)`, sel.Namespace, sel.IDs)
	default:
		rows, err = db.QueryContext(ctx, q.Select+` AND `+q.Updated+` >= $2 AND `+q.ID+` COLLATE "C" > $3
			ORDER BY `+q.ID+` COLLATE "C" LIMIT $4`, sel.Namespace, sel.Since, sel.After, sel.Limit)
	}
	if err != nil {
		return nil, fmt.Errorf("read %s of %s: %w", what, sel.Namespace, err)
	}
	defer rows.Close()
	var out []Row
	for rows.Next() {
		r, err := q.Scan(rows)
		if err != nil {
			return nil, fmt.Errorf("read %s of %s: %w", what, sel.Namespace, err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read %s of %s: %w", what, sel.Namespace, err)
	}
	return out, nil
}
