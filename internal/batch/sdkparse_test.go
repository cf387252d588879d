package batch_test

// Emulations of how each official SDK reads a $batch response, written from the SDK
// sources (docs/protocol.md §6.3/§6.4, §11). The Go one is a transcription of aztables v1.4.1
// buildTransactionResponse; sdk_test.go additionally runs the real Go SDK. The others
// follow the JS, .NET and Python code paths step by step, keeping their literal quirks
// (string splitting, regexes, strict CRLF sections, three-field status lines).

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"regexp"
	"strconv"
	"strings"
)

// ---- Go: aztables v1.4.1 transactional_batch.go buildTransactionResponse -------------

// goSDKParse returns whether the Go SDK reports the transaction as failed, or the error
// it returns for a response it cannot read.
func goSDKParse(status int, body []byte) (failed bool, err error) {
	if status != http.StatusAccepted && status != http.StatusNoContent {
		return true, nil
	}
	if bytes.IndexByte(body, '{') == 0 {
		return true, nil
	}
	outerBoundary := goBoundaryName(body)
	mpReader := multipart.NewReader(bytes.NewReader(body), outerBoundary)
	outerPart, err := mpReader.NextPart()
	if err != nil {
		return false, err
	}
	innerBytes, err := io.ReadAll(outerPart)
	if err != nil && err != io.ErrUnexpectedEOF {
		return false, err
	}
	innerBoundary := goBoundaryName(innerBytes)
	mpReader = multipart.NewReader(bytes.NewReader(innerBytes), innerBoundary)
	innerPart, err := mpReader.NextPart()
	for ; err == nil; innerPart, err = mpReader.NextPart() {
		part, err := io.ReadAll(innerPart)
		if err != nil {
			break
		}
		req, _ := http.NewRequest(http.MethodPost, "http://127.0.0.1/$batch", nil)
		r, err := http.ReadResponse(bufio.NewReader(bytes.NewBuffer(part)), req)
		if err != nil {
			return false, err
		}
		if r.StatusCode >= 400 {
			return true, nil
		}
	}
	return false, nil
}

func goBoundaryName(b []byte) string {
	end := bytes.Index(b, []byte("\n"))
	if end > 0 && b[end-1] == '\r' {
		end--
	}
	if end < 2 { // the SDK would panic here; report it as garbage
		return "\x00"
	}
	return string(b[2:end])
}

// ---- JS: @azure/data-tables TableTransaction.ts parseTransactionResponse -------------

// jsDot is JavaScript's '.': anything but a line terminator (\n, \r, U+2028, U+2029).
const jsDot = `[^\n\r\x{2028}\x{2029}]`

var (
	jsStatusRe = regexp.MustCompile(`HTTP/1.1 ([0-9]*)`)
	jsBodyRe   = regexp.MustCompile(`\{(` + jsDot + `*)\}`)
	jsETagRe   = regexp.MustCompile(`ETag: (` + jsDot + `*)`)
	jsRowKeyRe = regexp.MustCompile(`RowKey='(` + jsDot + `*)'`)
)

type jsSubResponse struct {
	status       int
	rowKey, etag string
	hasRK, hasET bool
}

// jsRestError is what handleBodyError throws.
type jsRestError struct {
	message, code string
	statusCode    int
}

func (e *jsRestError) Error() string {
	return fmt.Sprintf("RestError %d %s: %s", e.statusCode, e.code, e.message)
}

func jsParse(status int, rawBody string) ([]jsSubResponse, error) {
	splitBody := strings.Split(rawBody, "--changesetresponse_")
	if !(200 <= status && status < 300) {
		return nil, jsHandleBodyError(rawBody, status)
	}
	var subResponses []string
	if len(splitBody) > 1 {
		subResponses = splitBody[1 : len(splitBody)-1]
	}
	var out []jsSubResponse
	for _, sub := range subResponses {
		m := jsStatusRe.FindStringSubmatch(sub)
		if len(m) != 2 {
			return nil, fmt.Errorf("couldn't extract status from sub-response:\n %s", sub)
		}
		st, err := strconv.Atoi(m[1])
		if err != nil {
			return nil, fmt.Errorf("expected sub-response status to be an integer %q", m[1])
		}
		if bm := jsBodyRe.FindString(sub); bm != "" {
			return nil, jsHandleBodyError(bm, st)
		}
		r := jsSubResponse{status: st}
		if em := jsETagRe.FindStringSubmatch(sub); len(em) == 2 {
			r.etag, r.hasET = em[1], true
		}
		if rm := jsRowKeyRe.FindStringSubmatch(sub); len(rm) == 2 {
			r.rowKey, r.hasRK = rm[1], true
		}
		out = append(out, r)
	}
	return out, nil
}

func jsHandleBodyError(text string, status int) error {
	var parsed map[string]json.RawMessage
	if json.Unmarshal([]byte(text), &parsed) != nil {
		parsed = nil
	}
	e := &jsRestError{message: "Transaction Failed", statusCode: status}
	if raw, ok := parsed["odata.error"]; ok {
		var oe struct {
			Code    string `json:"code"`
			Message *struct {
				Value *string `json:"value"`
			} `json:"message"`
		}
		if json.Unmarshal(raw, &oe) == nil {
			e.code = oe.Code
			if oe.Message != nil && oe.Message.Value != nil {
				e.message = *oe.Message.Value
			}
		}
	}
	return e
}

// ---- .NET: Azure.Core Multipart.ParseAsync + TableClient.SubmitTransaction -----------

type dotnetResponse struct {
	status int
	reason string
	header map[string]string
	body   []byte
}

// dotnetTransactionFailed mirrors TableTransactionFailedException.
type dotnetTransactionFailed struct {
	index     *int // FailedTransactionActionIndex from message.value
	regexIdx  *int // the older `"value":"(\d+):` extraction
	errorCode string
}

func (e *dotnetTransactionFailed) Error() string {
	return "TableTransactionFailedException " + e.errorCode
}

var dotnetOldIndexRe = regexp.MustCompile(`"value":"(\d+):`)

// dotnetSubmit returns the sub-responses of a successful transaction or the exception.
func dotnetSubmit(status int, contentType string, body []byte) ([]dotnetResponse, error) {
	if status != http.StatusAccepted {
		return nil, fmt.Errorf("RequestFailedException: status %d", status)
	}
	responses, err := dotnetMultipart(contentType, body)
	if err != nil {
		return nil, err
	}
	if len(responses) == 1 && responses[0].status >= 400 {
		ex := &dotnetTransactionFailed{}
		// The error body's first (only) property must be odata.error.
		dec := json.NewDecoder(bytes.NewReader(responses[0].body))
		if t, err := dec.Token(); err != nil || t != json.Delim('{') {
			return nil, fmt.Errorf("error body is not a JSON object: %q", responses[0].body)
		}
		if t, err := dec.Token(); err != nil || t != "odata.error" {
			return nil, fmt.Errorf("first property is %v, not odata.error", t)
		}
		var oe struct {
			Code    string `json:"code"`
			Message struct {
				Value string `json:"value"`
			} `json:"message"`
		}
		if err := dec.Decode(&oe); err != nil {
			return nil, err
		}
		ex.errorCode = oe.Code
		if i := strings.IndexByte(oe.Message.Value, ':'); i > 0 {
			if n, err := strconv.Atoi(oe.Message.Value[:i]); err == nil {
				ex.index = &n
			}
		}
		if m := dotnetOldIndexRe.FindSubmatch(responses[0].body); m != nil {
			n, _ := strconv.Atoi(string(m[1]))
			ex.regexIdx = &n
		}
		return nil, ex
	}
	return responses, nil
}

// dotnetMultipart follows Multipart.ParseAsync: the boundary from the Content-Type
// header, sections delimited strictly by CRLF, a section whose Content-Type has a
// boundary opens a nested reader, other sections are HTTP responses.
func dotnetMultipart(contentType string, body []byte) ([]dotnetResponse, error) {
	_, params, err := mime.ParseMediaType(contentType)
	if err != nil || params["boundary"] == "" {
		return nil, fmt.Errorf("no boundary in %q", contentType)
	}
	var out []dotnetResponse
	var walk func(boundary string, data []byte) error
	walk = func(boundary string, data []byte) error {
		sections, err := crlfSections(boundary, data)
		if err != nil {
			return err
		}
		for _, s := range sections {
			hdr, rest, err := crlfHeaders(s)
			if err != nil {
				return err
			}
			if ct := hdr["Content-Type"]; ct != "" {
				if _, p, err := mime.ParseMediaType(ct); err == nil && p["boundary"] != "" {
					if err := walk(p["boundary"], rest); err != nil {
						return err
					}
					continue
				}
			}
			r, err := dotnetResponseFrom(rest)
			if err != nil {
				return err
			}
			out = append(out, r)
		}
		return nil
	}
	return out, walk(params["boundary"], body)
}

// crlfSections splits like ASP.NET's MultipartReader: "--boundary" at the very start or
// after CRLF; bare LF is not a line end.
func crlfSections(boundary string, data []byte) ([][]byte, error) {
	first := []byte("--" + boundary + "\r\n")
	if !bytes.HasPrefix(data, first) {
		i := bytes.Index(data, append([]byte("\r\n"), first...))
		if i < 0 {
			return nil, errors.New("multipart: first boundary not found")
		}
		data = data[i+2:]
	}
	data = data[len(first):]
	delim := []byte("\r\n--" + boundary)
	var out [][]byte
	for {
		i := bytes.Index(data, delim)
		if i < 0 {
			return nil, errors.New("multipart: unexpected end of stream")
		}
		out = append(out, data[:i])
		data = data[i+len(delim):]
		if bytes.HasPrefix(data, []byte("--")) {
			return out, nil
		}
		if !bytes.HasPrefix(data, []byte("\r\n")) {
			return nil, errors.New("multipart: boundary not followed by CRLF")
		}
		data = data[2:]
	}
}

func crlfHeaders(s []byte) (map[string]string, []byte, error) {
	h := map[string]string{}
	for {
		i := bytes.Index(s, []byte("\r\n"))
		if i < 0 {
			return nil, nil, errors.New("section headers not terminated")
		}
		line := string(s[:i])
		s = s[i+2:]
		if line == "" {
			return h, s, nil
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			return nil, nil, fmt.Errorf("bad section header %q", line)
		}
		h[http.CanonicalHeaderKey(strings.TrimSpace(k))] = strings.TrimSpace(v)
	}
}

// dotnetResponseFrom parses one HTTP response like Multipart.ParseAsync does.
func dotnetResponseFrom(b []byte) (dotnetResponse, error) {
	r := dotnetResponse{header: map[string]string{}}
	rd := bufio.NewReader(bytes.NewReader(b))
	readLine := func() (string, bool) {
		l, err := rd.ReadString('\n')
		if err != nil && l == "" {
			return "", false
		}
		return strings.TrimRight(l, "\r\n"), true
	}
	line, _ := readLine()
	status := strings.SplitN(line, " ", 3)
	if len(status) != 3 {
		return r, fmt.Errorf("invalid status line %q", line)
	}
	n, err := strconv.Atoi(status[1])
	if err != nil {
		return r, err
	}
	r.status, r.reason = n, status[2]
	for {
		l, ok := readLine()
		if !ok || strings.TrimSpace(l) == "" {
			break
		}
		i := strings.IndexByte(l, ':')
		if i <= 0 {
			return r, fmt.Errorf("invalid header line %q", l)
		}
		r.header[l[:i]] = strings.TrimSpace(l[i+1:])
	}
	r.body, _ = io.ReadAll(rd)
	return r, nil
}

// ---- Python: azure-core HttpResponse.parts() + azure-data-tables _batch_send ----------

// pythonTransactionError mirrors TableTransactionError.
type pythonTransactionError struct {
	index  int
	code   string
	status int
}

func (e *pythonTransactionError) Error() string {
	return fmt.Sprintf("TableTransactionError %d %s", e.index, e.code)
}

func pythonSubmit(status int, contentType string, body []byte) ([]int, error) {
	if status != http.StatusAccepted {
		return nil, fmt.Errorf("HttpResponseError %d", status)
	}
	// email.message_from_bytes("Content-Type: ...\r\n\r\n" + body), then each part:
	// multipart/mixed recurses, application/http is deserialised by http.client.
	_, params, err := mime.ParseMediaType(contentType)
	if err != nil {
		return nil, err
	}
	var statuses []int
	var errPart *http.Response
	var errBody []byte
	var walk func(boundary string, r io.Reader) error
	walk = func(boundary string, r io.Reader) error {
		mr := multipart.NewReader(r, boundary)
		for {
			p, err := mr.NextPart()
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return err
			}
			mt, pp, err := mime.ParseMediaType(p.Header.Get("Content-Type"))
			if err != nil {
				return err
			}
			switch mt {
			case "multipart/mixed":
				if err := walk(pp["boundary"], p); err != nil {
					return err
				}
			case "application/http":
				resp, err := http.ReadResponse(bufio.NewReader(p), nil)
				if err != nil {
					return err
				}
				b, _ := io.ReadAll(resp.Body)
				statuses = append(statuses, resp.StatusCode)
				if (resp.StatusCode < 200 || resp.StatusCode >= 300) && errPart == nil {
					errPart, errBody = resp, b
				}
			default:
				return fmt.Errorf("multipart doesn't support part other than application/http: %s", mt)
			}
		}
	}
	if err := walk(params["boundary"], bytes.NewReader(body)); err != nil {
		return nil, err
	}
	if errPart == nil {
		return statuses, nil
	}
	var oe struct {
		OdataError struct {
			Code    string `json:"code"`
			Message struct {
				Value string `json:"value"`
			} `json:"message"`
		} `json:"odata.error"`
	}
	_ = json.Unmarshal(errBody, &oe)
	code := errPart.Header.Get("x-ms-error-code")
	if code == "" {
		code = oe.OdataError.Code
	}
	// TableTransactionError._extract_index: int(message.split(":", 1)[0]), default 0.
	index := 0
	if n, err := strconv.Atoi(strings.SplitN(oe.OdataError.Message.Value, ":", 2)[0]); err == nil {
		index = n
	}
	return nil, &pythonTransactionError{index: index, code: code, status: errPart.StatusCode}
}
