package config

import (
	"fmt"
	"strconv"
	"time"
)

// ParseTime reads a point in time as the CLI and the admin API take it:
// RFC 3339, Unix seconds, or a duration meaning that long before now
// ("2h", "90m"). An empty value is the zero time.
func ParseTime(v string, now time.Time) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		return time.Unix(n, 0), nil
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("%q: want RFC 3339, Unix seconds or a duration ago such as 2h", v)
}
