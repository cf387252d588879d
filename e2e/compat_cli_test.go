package e2e

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestCompatCLI runs the Azure CLI compatibility suite (compat/cli/test_cli.sh: az storage
// table … and az storage entity … with --connection-string) against a cerulean server started
// by the harness, so it runs on whichever engine CERULEAN_TEST_ENGINE_ARGS selects.
//
// Install: apt-get install -y azure-cli (Debian's package; it also provides /usr/bin/python3,
// which the script uses to check JSON output). Without az the test skips, except under CI=true.
func TestCompatCLI(t *testing.T) { compatCLI(t, false) }

// TestHTTPSCompatCLI runs the same suite over HTTPS (--tls-self-signed), the certificate
// trusted the way the Azure CLI documents for a private CA: REQUESTS_CA_BUNDLE. It first
// checks that the CLI refuses the certificate untrusted. When scripts/test's postgres
// pass will run the whole suite over HTTPS (PostgreSQL configured, this pass not HTTPS
// itself), it runs a short round trip instead of the suite.
func TestHTTPSCompatCLI(t *testing.T) { compatCLI(t, true) }

func compatCLI(t *testing.T, https bool) {
	root := compatRepoRoot(t)
	az, err := exec.LookPath("az")
	if err != nil {
		compatUnavailable(t, "az is not installed (apt-get install -y azure-cli): %v", err)
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		compatUnavailable(t, "bash is not installed: %v", err)
	}
	if _, err := exec.LookPath(debianPython); err != nil {
		compatUnavailable(t, "%s is missing (the script checks JSON with it): %v", debianPython, err)
	}
	if out, err := exec.Command(az, "version", "--query", `"azure-cli"`, "-o", "tsv").Output(); err == nil {
		t.Logf("azure-cli %s", strings.TrimSpace(string(out)))
	}

	srv, env := compatServer(t, https, "REQUESTS_CA_BUNDLE")
	if https {
		requireUntrusted(t, srv, root, bash, "-c", `az storage table list --connection-string "$CERULEAN_CONNECTION_STRING" --only-show-errors -o none`)
		if os.Getenv("CERULEAN_TEST_POSTGRES_URL") != "" && os.Getenv("CERULEAN_TEST_HTTPS") == "" {
			// scripts/test's postgres pass runs TestCompatCLI, the whole script, over
			// HTTPS: here the certificate checks and a round trip that trusts it suffice
			// (the script takes minutes of the CI's time).
			compatRun(t, root, compatConnectionString(srv), env, bash, "-c", cliTrustedRoundTrip)
			return
		}
	}
	compatRun(t, root, compatConnectionString(srv), append(env, "PYTHON="+debianPython), bash, "compat/cli/test_cli.sh")
}

// cliTrustedRoundTrip is TestHTTPSCompatCLI's short run when the whole script runs over
// HTTPS in another pass: a table created, an entity inserted and read back, the table
// deleted, with the certificate trusted through REQUESTS_CA_BUNDLE.
const cliTrustedRoundTrip = `set -euo pipefail
export AZURE_CONFIG_DIR=$(mktemp -d) AZURE_CORE_COLLECT_TELEMETRY=no AZURE_CORE_ONLY_SHOW_ERRORS=1
trap 'rm -rf "$AZURE_CONFIG_DIR"' EXIT
t="clitls$RANDOM$RANDOM"
cs=(--connection-string "$CERULEAN_CONNECTION_STRING" --only-show-errors)
az storage table create --name "$t" "${cs[@]}" -o none
az storage entity insert --table-name "$t" --entity PartitionKey=p RowKey=r Greeting=hello "${cs[@]}" -o none
got=$(az storage entity show --table-name "$t" --partition-key p --row-key r --select Greeting "${cs[@]}" --query Greeting -o tsv)
[ "$got" = hello ] || { echo "read back over HTTPS: '$got'" >&2; exit 1; }
az storage table delete --name "$t" "${cs[@]}" -o none
echo "created, wrote, read and deleted over HTTPS with the certificate trusted"
`
