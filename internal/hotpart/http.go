package hotpart

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// DefaultTop is how many partitions per table /debug/partitions shows without ?top=.
const DefaultTop = 10

// Handler serves the Report as JSON (/debug/partitions): ?account= and ?table= keep one
// account's or table's partitions, ?top=N the N busiest per table (default DefaultTop;
// 0 for every tracked one).
func (t *Tracker) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		f := Filter{Account: q.Get("account"), Table: q.Get("table"), Top: DefaultTop}
		if v := q.Get("top"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				http.Error(w, "top: want a number of partitions, 0 for all", http.StatusBadRequest)
				return
			}
			f.Top = n
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(t.Report(f)) // the client went away
	})
}
