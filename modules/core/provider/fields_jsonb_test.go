package provider_test

import (
	"database/sql"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/core/provider"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
)

// probe reads the members a handler typically reads, each by a path that
// TestFieldsReadAsPostgreSQL also asks PostgreSQL for.
type probe struct {
	ID       string                `field:"id"`
	ObjectID string                `field:"data.object.id"`
	Status   string                `field:"data.object.status"`
	Price    string                `field:"data.object.items.data.0.price.id"`
	Customer provider.ExpandableID `field:"data.object.customer"`
	Created  int64                 `field:"created"`
}

var probeFields = provider.FieldsOf[probe]()

// TestFieldsReadAsPostgreSQL: for the same bytes, Fields reads what
// payload::jsonb #>> reads in PostgreSQL, for every real provider payload
// and for bodies that repeat keys, vary their case, escape them or nest
// them where a path expects something else: a NULL is the zero value, and
// a member whose JSON type is not its field's is an error.
func TestFieldsReadAsPostgreSQL(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	bodies := []string{
		`{"id":"evt_1","id":"evt_2","created":1,"created":2}`,
		`{"id":"evt_1","ID":"evt_2","Created":5}`,
		`{"data":{"object":{"id":"a","status":"active"}},"data":{"object":{"status":"canceled"}}}`,
		`{"data":{"object":{"id":"a"},"object":{"id":"b","id":"c"}}}`,
		`{"data":{"object":{"status":"active","status":null}}}`,
		`{"d\u0061ta":{"obj\u0065ct":{"\u0069d":"escaped \u00e9 \ud83d\ude00"}}}`,
		`{"data":"a string"}`, `{"data":[{"object":{"id":"a"}}]}`, `{"data":{"object":null}}`,
		`{"data":{"object":{"items":{"data":[null,{"price":{"id":"p2"}}]}}}}`,
		`{"data":{"object":{"items":{"data":{"0":{"price":{"id":"keyed"}}}}}}}`,
		`{"data":{"object":{"items":{"data":[{"price":{"id":"p1","id":"p2"}}]}}}}`,
		`{"data":{"object":{"customer":"cus_1"}}}`, `{"data":{"object":{"customer":{"id":"cus_2","id":"cus_3"}}}}`,
		`{"data":{"object":{"customer":{"object":"customer"}}}}`, `{"data":{"object":{"customer":null}}}`,
		`{"data":{"object":{"id":5}}}`, `{"created":"5"}`, `{"created":1.5}`, `{"created":-7}`, `{}`,
		`{"created":1e2}`, `{"created":1.0}`, `{"created":-0}`, `{"created":1.5E1}`, `{"created":25e-1}`, `{"created":100e-2}`,
		`{"created":9223372036854775807}`, `{"created":9223372036854775808}`, `{"created":9.2e18}`, `{"created":1e19}`,
	}
	files, err := filepath.Glob("../../../testdata/providers/*/*.json")
	require.NoError(t, err)
	corpus, err := filepath.Glob("../../../testdata/corpus/*/*.json")
	require.NoError(t, err)
	for _, file := range append(files, corpus...) {
		b, err := os.ReadFile(file)
		require.NoError(t, err)
		if json.Valid(b) && strings.HasPrefix(strings.TrimSpace(string(b)), "{") {
			bodies = append(bodies, string(b))
		}
	}
	checked := 0
	for _, body := range bodies {
		want, wantErr := readInPostgreSQL(t, db.SQL, body)
		got, err := probeFields.Read([]byte(body))
		if wantErr {
			require.Error(t, err, body)
			continue
		}
		require.NoError(t, err, body)
		require.Equal(t, want, got, body)
		checked++
	}
	require.Greater(t, checked, 100, "the real payloads were read")
}

// readInPostgreSQL reads probe's members of body with payload::jsonb, and
// says whether a member's JSON type is not the one its field takes.
func readInPostgreSQL(t *testing.T, db *sql.DB, body string) (probe, bool) {
	t.Helper()
	var (
		p                 probe
		strs              [5]sql.NullString
		types             [6]sql.NullString
		customerID        sql.NullString
		customerIDType    sql.NullString
		created           sql.NullString
		createdIsInt64    sql.NullBool
		paths             = []string{"{id}", "{data,object,id}", "{data,object,status}", "{data,object,items,data,0,price,id}", "{data,object,customer}"}
		stringsAndTypeSQL = make([]string, 0, 12)
	)
	for _, path := range paths {
		stringsAndTypeSQL = append(stringsAndTypeSQL, "b #>> '"+path+"'", "jsonb_typeof(b #> '"+path+"')")
	}
	err := db.QueryRow(`SELECT `+strings.Join(stringsAndTypeSQL, ", ")+`,
			b #>> '{data,object,customer,id}', jsonb_typeof(b #> '{data,object,customer,id}'),
			b #>> '{created}', jsonb_typeof(b #> '{created}'),
			CASE WHEN jsonb_typeof(b #> '{created}') = 'number'
				THEN b #>> '{created}' ~ '^-?[0-9]+$'
					AND (b #>> '{created}')::numeric BETWEEN -9223372036854775808 AND 9223372036854775807 END
		FROM (SELECT $1::jsonb AS b) j`, body).Scan(
		&strs[0], &types[0], &strs[1], &types[1], &strs[2], &types[2], &strs[3], &types[3], &strs[4], &types[4],
		&customerID, &customerIDType, &created, &types[5], &createdIsInt64)
	require.NoError(t, err, body)
	for i := range 4 {
		if types[i].Valid && types[i].String != "string" && types[i].String != "null" {
			return probe{}, true
		}
	}
	switch types[4].String {
	case "", "null":
	case "string":
		p.Customer = provider.ExpandableID(strs[4].String)
	case "object":
		if customerIDType.Valid && customerIDType.String != "string" && customerIDType.String != "null" {
			return probe{}, true
		}
		if customerIDType.String == "string" {
			p.Customer = provider.ExpandableID(customerID.String)
		}
	default:
		return probe{}, true
	}
	switch types[5].String {
	case "", "null":
	case "number":
		if !createdIsInt64.Bool {
			return probe{}, true
		}
		require.NoError(t, json.Unmarshal([]byte(created.String), &p.Created))
	default:
		return probe{}, true
	}
	if types[0].String == "string" {
		p.ID = strs[0].String
	}
	if types[1].String == "string" {
		p.ObjectID = strs[1].String
	}
	if types[2].String == "string" {
		p.Status = strs[2].String
	}
	if types[3].String == "string" {
		p.Price = strs[3].String
	}
	return p, false
}
