package svcprops

import (
	"net/http"
	"time"
)

// AppendStats appends the Get Table Service Stats response body: geo-replication status
// "live" and lastSync as an RFC 1123 GMT time (what the Go SDK parses).
func AppendStats(dst []byte, lastSync time.Time) []byte {
	dst = append(dst, xmlHeader...)
	dst = append(dst, "<StorageServiceStats><GeoReplication><Status>live</Status><LastSyncTime>"...)
	dst = lastSync.UTC().AppendFormat(dst, http.TimeFormat)
	return append(dst, "</LastSyncTime></GeoReplication></StorageServiceStats>"...)
}
