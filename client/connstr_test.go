package client

import (
	"strings"
	"testing"
)

func TestOpen(t *testing.T) {
	for _, c := range []struct {
		in                       string
		endpoint, account, table string
		sas                      bool
		err                      string
	}{
		{in: "UseDevelopmentStorage=true", endpoint: DevEndpoint, account: DevAccount},
		{in: "usedevelopmentstorage=true;DevelopmentStorageProxyUri=http://10.0.0.5", endpoint: "http://10.0.0.5:10002/devstoreaccount1", account: DevAccount},
		{in: "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=" + DevKey + ";EndpointSuffix=core.chinacloudapi.cn", endpoint: "https://acct.table.core.chinacloudapi.cn", account: "acct"},
		{in: "AccountName=acct;AccountKey=" + DevKey, endpoint: "https://acct.table.core.windows.net", account: "acct"},
		{in: "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=" + DevKey + ";TableEndpoint=http://127.0.0.1:10002/devstoreaccount1;", endpoint: "http://127.0.0.1:10002/devstoreaccount1", account: DevAccount},
		{in: "TableEndpoint=https://acct.table.core.windows.net/;SharedAccessSignature=sv=2020-12-06&sig=abc%3D", endpoint: "https://acct.table.core.windows.net", account: "acct", sas: true},
		{in: "TableEndpoint=http://127.0.0.1:10002/devstoreaccount1;SharedAccessSignature=?sv=1&sig=x", endpoint: "http://127.0.0.1:10002/devstoreaccount1", account: DevAccount, sas: true},
		{in: "https://acct.table.core.windows.net/orders?sv=2020-12-06&tn=orders&sig=abc", endpoint: "https://acct.table.core.windows.net", account: "acct", table: "orders", sas: true},
		{in: "https://acct.table.core.windows.net/?sv=2020-12-06&sig=abc", endpoint: "https://acct.table.core.windows.net", account: "acct", sas: true},
		{in: "http://127.0.0.1:10002/devstoreaccount1/orders()?sv=1&sig=abc", endpoint: "http://127.0.0.1:10002/devstoreaccount1", account: DevAccount, table: "orders", sas: true},
		{in: "http://localhost:10002/devstoreaccount1?sv=1&sig=abc", endpoint: "http://localhost:10002/devstoreaccount1", account: DevAccount, sas: true},
		{in: "", err: "empty"},
		{in: "AccountName=acct", err: "AccountKey"},
		{in: "AccountName=acct;AccountKey=not base64!", err: "account key"},
		{in: "AccountName=acct;AccountName=b;AccountKey=" + DevKey, err: "twice"},
		{in: "DefaultEndpointsProtocol=ftp;AccountName=a;AccountKey=" + DevKey, err: "http or https"},
		{in: "justtext", err: "key=value"},
		{in: "TableEndpoint=https://a.table.core.windows.net;SharedAccessSignature=sv=1", err: "no sig"},
		{in: "https://acct.table.core.windows.net/orders", err: "no sig"},
		{in: "https://acct.table.core.windows.net/a/b?sig=x", err: "unexpected path"},
	} {
		got, err := Open(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("Open(%q) = %v, want an error with %q", c.in, err, c.err)
			}
			if err != nil && strings.Contains(err.Error(), DevKey) {
				t.Errorf("Open(%q): the error shows the key: %v", c.in, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("Open(%q): %v", c.in, err)
			continue
		}
		if got.Endpoint != c.endpoint || got.Account != c.account || got.Table != c.table || (len(got.sas) > 0) != c.sas || (got.key == nil) != c.sas {
			t.Errorf("Open(%q) = endpoint %q account %q table %q sas %v key %v", c.in, got.Endpoint, got.Account, got.Table, got.sas, got.key != nil)
		}
	}
}

func TestParseBatchResponse(t *testing.T) {
	ok := "--batchresponse_1\r\nContent-Type: multipart/mixed; boundary=changesetresponse_2\r\n\r\n" +
		"--changesetresponse_2\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n\r\nHTTP/1.1 204 No Content\r\nContent-ID: 1\r\n\r\n\r\n" +
		"--changesetresponse_2\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n\r\nHTTP/1.1 201 Created\r\nContent-ID: 2\r\n\r\n\r\n" +
		"--changesetresponse_2--\r\n--batchresponse_1--\r\n"
	fail := "--batchresponse_1\r\nContent-Type: multipart/mixed; boundary=changesetresponse_2\r\n\r\n" +
		"--changesetresponse_2\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n\r\nHTTP/1.1 409 Conflict\r\nContent-ID: 3\r\nContent-Type: application/json;odata=minimalmetadata\r\n\r\n" +
		`{"odata.error":{"code":"EntityAlreadyExists","message":{"lang":"en-US","value":"2:The specified entity already exists.\nRequestId:x\nTime:y"}}}` + "\r\n" +
		"--changesetresponse_2--\r\n--batchresponse_1--\r\n"
	ct := "multipart/mixed; boundary=batchresponse_1"
	if err := parseBatchResponse(ct, []byte(ok)); err != nil {
		t.Errorf("success: %v", err)
	}
	err := parseBatchResponse(ct, []byte(fail))
	be, isBatch := err.(*BatchError)
	if !isBatch || be.Index != 2 || be.Err.Code != "EntityAlreadyExists" || be.Err.Status != 409 {
		t.Fatalf("failure: %#v", err)
	}
	if want := "operation 2: 409 EntityAlreadyExists: 2:The specified entity already exists."; err.Error() != want {
		t.Errorf("message %q, want %q", err.Error(), want)
	}
	for _, bad := range []string{"", "--x--", "not multipart"} {
		if err := parseBatchResponse(ct, []byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	if err := parseBatchResponse("application/json", []byte(ok)); err == nil {
		t.Error("a JSON answer: no error")
	}
}

// Keys in a (PartitionKey='…',RowKey='…') address: quotes doubled, then escaped as a
// path segment.
func TestKeyEscape(t *testing.T) {
	for in, want := range map[string]string{"a": "a", "it's": "it%27%27s", "100%": "100%25", "a/b?c#d": "a%2Fb%3Fc%23d", "ü": "%C3%BC", "": ""} {
		if got := keyEscape(in); got != want {
			t.Errorf("keyEscape(%q) = %q, want %q", in, got, want)
		}
	}
}
