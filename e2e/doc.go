// Package e2e is Cerulean's black-box suite: it builds the real cerulean binary, starts it as
// a child process on a free port, and drives it over HTTP through the official Go SDK
// (github.com/Azure/azure-sdk-for-go/sdk/data/aztables) and, where the SDK cannot express a
// request, through raw HTTP requests signed with SharedKeyLite.
//
// Run it with
//
//	go test ./e2e/ -count=1
//
// Environment:
//
//	CERULEAN_TEST_BINARY       use this prebuilt binary instead of building ./cmd/cerulean
//	CERULEAN_TEST_ENGINE_ARGS  extra arguments appended to `cerulean serve` (split on
//	                           whitespace), e.g. "--engine postgres --postgres-url postgres://..."
//	CERULEAN_TEST_LOG_LEVEL    passed as --log-level to every server (default: not passed)
//	CERULEAN_TEST_VERBOSE_LOGS print every server's output even when its test passes
//	CERULEAN_TEST_ARTIFACTS    TestDocs writes its summary there (docs-summary.txt)
//
// Every test uses table (and account) names with a per-run random part, so the suite also
// works against an engine whose storage outlives one server process (a shared database).
package e2e
