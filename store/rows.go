package store

import "context"

// scanner is a row to read: a *sql.Row or the current row of *sql.Rows.
type scanner interface{ Scan(...any) error }

// eachRow runs query on q and calls fn for each row in order. Its errors
// are the query's, fn's or the rows' own, unwrapped: the caller names what
// it was reading.
func eachRow(ctx context.Context, q querier, fn func(scanner) error, query string, args ...any) error {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := fn(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// queryRows runs query on q and reads each row with scan, in order; nil
// with the error when one fails (errors as for eachRow).
func queryRows[T any](ctx context.Context, q querier, scan func(scanner) (T, error), query string, args ...any) ([]T, error) {
	var out []T
	err := eachRow(ctx, q, func(r scanner) error {
		v, err := scan(r)
		if err != nil {
			return err
		}
		out = append(out, v)
		return nil
	}, query, args...)
	if err != nil {
		return nil, err
	}
	return out, nil
}
