package server

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/ceruleandb/cerulean/internal/azerr"
)

// DefaultVersion is the x-ms-version a request without the header is processed with (and
// that its response echoes): the version the Go, JavaScript and Python SDKs send.
const DefaultVersion = "2019-02-02"

// serviceVersions are the x-ms-version values Cerulean accepts: every version of the
// storage services from 2013-08-15, the first that speaks JSON to the Table service
// (older ones are Atom-only, which Cerulean does not serve), to the newest the SDKs send.
// Sources: "Versioning for Azure Storage" and "Previous Azure Storage service versions"
// (https://learn.microsoft.com/rest/api/storageservices/versioning-for-the-azure-storage-services),
// Azurite's ValidAPIVersions (src/table/utils/constants.ts, which lacks 2023-05-03) and the
// Java SDK's BlobServiceVersion (which adds 2026-10-06, the newest an SDK sends). The SDKs
// in use send 2019-02-02 (Go aztables, JavaScript, Python azure-data-tables), 2017-04-17
// (the Azure CLI's older table commands) and 2020-12-06 and later (.NET).
var serviceVersions = map[string]bool{
	"2013-08-15": true, "2014-02-14": true,
	"2015-02-21": true, "2015-04-05": true, "2015-07-08": true, "2015-12-11": true,
	"2016-05-31": true,
	"2017-04-17": true, "2017-07-29": true, "2017-11-09": true,
	"2018-03-28": true, "2018-11-09": true,
	"2019-02-02": true, "2019-07-07": true, "2019-10-10": true, "2019-12-12": true,
	"2020-02-10": true, "2020-04-08": true, "2020-06-12": true, "2020-08-04": true,
	"2020-10-02": true, "2020-12-06": true,
	"2021-02-12": true, "2021-04-10": true, "2021-06-08": true, "2021-08-06": true,
	"2021-10-04": true, "2021-12-02": true,
	"2022-11-02": true,
	"2023-01-03": true, "2023-05-03": true, "2023-08-03": true, "2023-11-03": true,
	"2024-02-04": true, "2024-05-04": true, "2024-08-04": true, "2024-11-04": true,
	"2025-01-05": true, "2025-05-05": true, "2025-07-05": true, "2025-11-05": true,
	"2026-02-06": true, "2026-04-06": true, "2026-06-06": true, "2026-10-06": true,
}

// oldestVersion and newestVersion bound serviceVersions, for messages.
const (
	oldestVersion = "2013-08-15"
	newestVersion = "2026-10-06"
)

// requestVersion is the service version a request is processed with: its x-ms-version, or
// DefaultVersion when the header is absent or empty. An unknown or malformed version is
// 400 InvalidHeaderValue naming the header, as the service answers it (HeaderName and
// HeaderValue in the error body). A request authorized by a shared access signature is
// processed with the signature's version (sv) and its x-ms-version is ignored, whatever it
// holds ("Previous Azure Storage service versions": "If the x-ms-version header is passed
// on the request, it's ignored. Only the SignedVersion (sv) parameter determines the
// service version", https://learn.microsoft.com/rest/api/storageservices/previous-azure-storage-service-versions);
// an sv Cerulean does not know is the signature's problem, which authentication reports
// (checkSASVersion, 403 AuthenticationFailed): neither path serves a version it does not
// know (docs/compatibility.md "Credentials").
func requestVersion(r *http.Request, q url.Values) (string, error) {
	if first(r.Header["Authorization"]) == "" && q.Has("sig") {
		if sv := q.Get("sv"); serviceVersions[sv] {
			return sv, nil
		}
		return DefaultVersion, nil
	}
	vs := r.Header["X-Ms-Version"] // x-ms-version
	switch {
	case len(vs) == 0 || len(vs) == 1 && vs[0] == "":
		return DefaultVersion, nil
	case len(vs) == 1 && serviceVersions[vs[0]]:
		return vs[0], nil
	}
	return "", azerr.InvalidHeader("x-ms-version", strings.Join(vs, ", "))
}
