package e2e

import (
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
// trusted the way the Azure CLI documents for a private CA: REQUESTS_CA_BUNDLE.
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
	}
	compatRun(t, root, compatConnectionString(srv), append(env, "PYTHON="+debianPython), bash, "compat/cli/test_cli.sh")
}
