package auth

// Shared access signatures (docs/protocol.md §8.5–8.6): parsing the SAS query parameters,
// verifying the signature against the account keys, and deciding whether the signed
// permissions cover one operation. The server owns routing; it tells this layer what a
// request wants to do through an Operation and enforces the returned Grant (the
// PartitionKey/RowKey range of a table SAS) while executing it.

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/ceruleandb/cerulean/internal/azerr"
)

// SASKind tells an account SAS from a table (service) SAS.
type SASKind int

const (
	// TableSAS is a service SAS for one table (tn), optionally limited to a key range
	// and optionally bound to a stored access policy (si).
	TableSAS SASKind = iota + 1
	// AccountSAS is an account SAS (ss, srt).
	AccountSAS
)

func (k SASKind) String() string {
	switch k {
	case TableSAS:
		return "table SAS"
	case AccountSAS:
		return "account SAS"
	}
	return "unknown SAS"
}

// minSASVersion is the oldest signed version accepted: the first with the current
// string-to-sign shapes (account SAS were introduced with it; table SAS gained sip/spr).
const minSASVersion = "2015-04-05"

// sesVersion is the first version whose account SAS string-to-sign includes ses.
const sesVersion = "2020-12-06"

// sasParams are the query parameters that make up a SAS, in the order listed in
// docs/protocol.md §8.5.
var sasParams = [...]string{"sv", "ss", "srt", "sp", "st", "se", "sip", "spr", "ses", "tn", "spk", "srk", "epk", "erk", "si", "sig"}

// IsSASParam reports whether the query parameter name belongs to a SAS (sv ss srt sp st se
// sip spr ses tn spk srk epk erk si sig). The server strips these before interpreting the
// rest of the query ($filter, $select, comp, NextPartitionKey, ...). Names are
// case-sensitive, as in the service.
func IsSASParam(name string) bool {
	for _, p := range sasParams {
		if p == name {
			return true
		}
	}
	return false
}

// SAS holds the parameters of a shared access signature exactly as received (decoded
// query values), plus the forms parsed from them. Absent and empty parameters are the
// same thing: both are signed as an empty string.
type SAS struct {
	Version         string // sv
	Services        string // ss (account SAS)
	ResourceTypes   string // srt (account SAS)
	Permissions     string // sp
	Start           string // st
	Expiry          string // se
	IP              string // sip
	Protocol        string // spr
	EncryptionScope string // ses (account SAS, sv >= 2020-12-06)
	TableName       string // tn (table SAS)
	StartPK         string // spk
	StartRK         string // srk
	EndPK           string // epk
	EndRK           string // erk
	Identifier      string // si (table SAS)
	Signature       string // sig (base64)

	// Parsed forms, filled by ParseSAS for information (logging, diagnostics).
	// AuthorizeSAS never trusts them: it re-derives everything from the strings above,
	// which are what the signature covers.
	Kind       SASKind
	StartTime  time.Time // zero when st is absent
	ExpiryTime time.Time // zero when se is absent
	IPStart    net.IP    // nil when sip is absent
	IPEnd      net.IP    // equal to IPStart for a single address
	HTTPSOnly  bool      // spr=https
}

// sasParsed is everything derived from the strings of a SAS.
type sasParsed struct {
	kind         SASKind
	start, exp   time.Time
	ipLo, ipHi   net.IP
	httpsOnly    bool
	sig          [sha256.Size]byte
	hasRange     bool
	signedSES    bool
	permsAllowed string
}

// ParseSAS extracts the SAS parameters from a request's decoded query. It returns nil, nil
// when the query has no sig parameter (the request is not SAS-authenticated). A malformed
// SAS yields a 403 AuthenticationFailed *azerr.Error whose Detail names the problem: a
// parameter given twice, a missing required parameter, a bad sv/st/se/sip/spr, a sig that
// is not the base64 of 32 bytes, unknown permission/service/resource-type letters, or
// parameters of the other SAS kind (tn/si/spk/... on an account SAS, ss/srt/ses on a table
// SAS).
//
// A SAS is an account SAS when ss or srt is present, otherwise a table SAS.
func ParseSAS(q url.Values) (*SAS, error) {
	if _, ok := q["sig"]; !ok {
		return nil, nil
	}
	var vals [len(sasParams)]string
	for i, name := range sasParams {
		vs := q[name]
		if len(vs) > 1 {
			return nil, sasMalformed(fmt.Sprintf("The SAS parameter '%s' is specified more than once.", name))
		}
		if len(vs) == 1 {
			vals[i] = vs[0]
		}
	}
	s := &SAS{
		Version: vals[0], Services: vals[1], ResourceTypes: vals[2], Permissions: vals[3],
		Start: vals[4], Expiry: vals[5], IP: vals[6], Protocol: vals[7], EncryptionScope: vals[8],
		TableName: vals[9], StartPK: vals[10], StartRK: vals[11], EndPK: vals[12], EndRK: vals[13],
		Identifier: vals[14], Signature: vals[15],
	}
	p, err := s.parse()
	if err != nil {
		return nil, err
	}
	s.Kind, s.StartTime, s.ExpiryTime, s.HTTPSOnly = p.kind, p.start, p.exp, p.httpsOnly
	s.IPStart, s.IPEnd = p.ipLo, p.ipHi
	return s, nil
}

// parse validates the strings of s and derives the parsed forms. It does not modify s.
func (s *SAS) parse() (*sasParsed, *azerr.Error) {
	p := &sasParsed{}
	if s.Signature == "" {
		return nil, sasMalformed("The SAS signature (sig) is empty.")
	}
	// A '+' in an unescaped query decodes to a space; base64 never contains spaces, so
	// restore it (several hand-written clients do not escape the signature).
	sig := strings.ReplaceAll(s.Signature, " ", "+")
	if len(sig) != sigLen {
		return nil, sasMalformed("The SAS signature (sig) is not the base64 encoding of a 32-byte HMAC-SHA256.")
	}
	var buf [36]byte
	if n, err := strictB64.Decode(buf[:], []byte(sig)); err != nil || n != sha256.Size {
		return nil, sasMalformed("The SAS signature (sig) is not the base64 encoding of a 32-byte HMAC-SHA256.")
	}
	copy(p.sig[:], buf[:sha256.Size])

	if s.Version == "" {
		return nil, sasMalformed("The signed version (sv) is required.")
	}
	if !validVersion(s.Version) {
		return nil, sasMalformed(fmt.Sprintf("The signed version (sv) '%s' is not a valid version (YYYY-MM-DD).", s.Version))
	}
	if s.Version < minSASVersion {
		return nil, sasMalformed(fmt.Sprintf("The signed version (sv) '%s' is not supported; use %s or later.", s.Version, minSASVersion))
	}

	if s.Services != "" || s.ResourceTypes != "" {
		p.kind = AccountSAS
	} else {
		p.kind = TableSAS
	}
	switch p.kind {
	case AccountSAS:
		for _, f := range [...]struct{ name, val string }{{"tn", s.TableName}, {"si", s.Identifier},
			{"spk", s.StartPK}, {"srk", s.StartRK}, {"epk", s.EndPK}, {"erk", s.EndRK}} {
			if f.val != "" {
				return nil, sasMalformed(fmt.Sprintf("The parameter '%s' is not valid in an account SAS (ss/srt present).", f.name))
			}
		}
		if s.Services == "" || s.ResourceTypes == "" || s.Permissions == "" || s.Expiry == "" {
			return nil, sasMalformed("An account SAS requires ss, srt, sp and se.")
		}
		if !onlyLetters(s.Services, "bqtf") {
			return nil, sasMalformed(fmt.Sprintf("The signed services (ss) '%s' are not valid (letters from 'bqtf').", s.Services))
		}
		if !onlyLetters(s.ResourceTypes, "sco") {
			return nil, sasMalformed(fmt.Sprintf("The signed resource types (srt) '%s' are not valid (letters from 'sco').", s.ResourceTypes))
		}
		if s.EncryptionScope != "" {
			if s.Version < sesVersion {
				return nil, sasMalformed(fmt.Sprintf("The encryption scope (ses) requires sv %s or later.", sesVersion))
			}
		}
		p.signedSES = s.Version >= sesVersion
		// Letters of every Azure account SAS version (rwdlacup plus x y t f i); only
		// the ones meaningful to tables grant anything.
		p.permsAllowed = "rwdxylacuptfi"
	case TableSAS:
		if s.EncryptionScope != "" {
			return nil, sasMalformed("The encryption scope (ses) is not valid in a table SAS.")
		}
		if s.TableName == "" {
			return nil, sasMalformed("A table SAS requires the table name (tn); an account SAS requires ss and srt.")
		}
		if s.Identifier == "" && (s.Permissions == "" || s.Expiry == "") {
			return nil, sasMalformed("A table SAS without a stored access policy (si) requires sp and se.")
		}
		if s.StartRK != "" && s.StartPK == "" {
			return nil, sasMalformed("The start row key (srk) requires a start partition key (spk).")
		}
		if s.EndRK != "" && s.EndPK == "" {
			return nil, sasMalformed("The end row key (erk) requires an end partition key (epk).")
		}
		p.hasRange = s.StartPK != "" || s.EndPK != ""
		p.permsAllowed = "raud"
	}
	if !onlyLetters(s.Permissions, p.permsAllowed) {
		return nil, sasMalformed(fmt.Sprintf("The signed permissions (sp) '%s' are not valid for a %s (letters from '%s').", s.Permissions, p.kind, p.permsAllowed))
	}

	var err error
	if s.Start != "" {
		if p.start, err = ParseSASTime(s.Start); err != nil {
			return nil, sasMalformed(fmt.Sprintf("The signed start (st) '%s' is not a valid ISO 8601 UTC time.", s.Start))
		}
	}
	if s.Expiry != "" {
		if p.exp, err = ParseSASTime(s.Expiry); err != nil {
			return nil, sasMalformed(fmt.Sprintf("The signed expiry (se) '%s' is not a valid ISO 8601 UTC time.", s.Expiry))
		}
	}
	if s.IP != "" {
		if p.ipLo, p.ipHi, err = parseIPRange(s.IP); err != nil {
			return nil, sasMalformed(fmt.Sprintf("The signed IP (sip) '%s' is not an address or a range 'a-b': %v.", s.IP, err))
		}
	}
	switch s.Protocol {
	case "", "https,http", "http,https":
	case "https":
		p.httpsOnly = true
	default:
		return nil, sasMalformed(fmt.Sprintf("The signed protocol (spr) '%s' is not valid: use 'https' or 'https,http'.", s.Protocol))
	}
	return p, nil
}

func sasMalformed(detail string) *azerr.Error {
	return authFailed(detail)
}

// validVersion reports whether v looks like YYYY-MM-DD (digits and dashes in place), so
// that versions compare correctly as strings.
func validVersion(v string) bool {
	if len(v) != 10 || v[4] != '-' || v[7] != '-' {
		return false
	}
	for i := 0; i < len(v); i++ {
		if i == 4 || i == 7 {
			continue
		}
		if v[i] < '0' || v[i] > '9' {
			return false
		}
	}
	return true
}

// onlyLetters reports whether every byte of s is one of allowed.
func onlyLetters(s, allowed string) bool {
	for i := 0; i < len(s); i++ {
		if strings.IndexByte(allowed, s[i]) < 0 {
			return false
		}
	}
	return true
}

// sasTimeLayouts are the ISO 8601 UTC forms the service accepts. When parsing, Go accepts
// a fractional second after the seconds field even if the layout has none.
var sasTimeLayouts = [...]string{
	"2006-01-02T15:04:05Z",
	"2006-01-02T15:04Z",
	"2006-01-02",
}

// ParseSASTime parses a SAS or access-policy time: ISO 8601 UTC as "YYYY-MM-DD",
// "YYYY-MM-DDThh:mmZ", "YYYY-MM-DDThh:mm:ssZ" or with a fraction of up to 7 digits
// ("…:ss.fffffffZ"). A date alone means midnight UTC.
func ParseSASTime(v string) (time.Time, error) {
	if strings.IndexByte(v, ',') >= 0 {
		return time.Time{}, fmt.Errorf("%q is not an ISO 8601 UTC time", v)
	}
	if i := strings.IndexByte(v, '.'); i >= 0 {
		// At most 7 fraction digits (the service's precision), then Z.
		frac := v[i+1:]
		if len(frac) < 2 || len(frac) > 8 || frac[len(frac)-1] != 'Z' {
			return time.Time{}, fmt.Errorf("bad fractional seconds in %q", v)
		}
	}
	for _, layout := range sasTimeLayouts {
		if t, err := time.Parse(layout, v); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("%q is not an ISO 8601 UTC time", v)
}

// parseIPRange parses "a" or "a-b" (IPv4 or IPv6, both ends the same family, a <= b).
func parseIPRange(v string) (lo, hi net.IP, err error) {
	a, b, isRange := strings.Cut(v, "-")
	lo = parseIP(a)
	if lo == nil {
		return nil, nil, fmt.Errorf("bad address %q", a)
	}
	if !isRange {
		return lo, lo, nil
	}
	hi = parseIP(b)
	if hi == nil {
		return nil, nil, fmt.Errorf("bad address %q", b)
	}
	if len(lo) != len(hi) {
		return nil, nil, fmt.Errorf("range ends are of different address families")
	}
	if bytes.Compare(lo, hi) > 0 {
		return nil, nil, fmt.Errorf("range start is after range end")
	}
	return lo, hi, nil
}

// parseIP parses an address into its 4-byte form for IPv4 (including IPv4-mapped IPv6)
// and 16-byte form otherwise.
func parseIP(s string) net.IP {
	ip := net.ParseIP(s)
	if ip == nil {
		return nil
	}
	if ip4 := ip.To4(); ip4 != nil {
		return ip4
	}
	return ip
}

// ipInRange reports whether ip lies in [lo, hi] (same family).
func ipInRange(ip, lo, hi net.IP) bool {
	if ip == nil {
		return false
	}
	if ip4 := ip.To4(); ip4 != nil {
		ip = ip4
	} else {
		ip = ip.To16()
	}
	if len(ip) != len(lo) {
		return false
	}
	return bytes.Compare(ip, lo) >= 0 && bytes.Compare(ip, hi) <= 0
}

// StringToSign returns the string a SAS signs for account (docs/protocol.md §8.6), built from
// the SAS's own fields; s must be well formed (as returned by ParseSAS).
//
//	table SAS:   sp\nst\nse\n/table/<account>/<lowercase tn>\nsi\nsip\nspr\nsv\nspk\nsrk\nepk\nerk
//	account SAS: <account>\nsp\nss\nsrt\nst\nse\nsip\nspr\nsv\n  (+ ses\n when sv >= 2020-12-06)
func (s *SAS) StringToSign(account string) string {
	if s.Services != "" || s.ResourceTypes != "" {
		return string(s.appendAccountSTS(nil, account, s.Version >= sesVersion))
	}
	return string(s.appendTableSTS(nil, account))
}

func (s *SAS) appendTableSTS(dst []byte, account string) []byte {
	for _, f := range [...]string{s.Permissions, s.Start, s.Expiry} {
		dst = append(dst, f...)
		dst = append(dst, '\n')
	}
	dst = append(dst, "/table/"...)
	dst = append(dst, account...)
	dst = append(dst, '/')
	dst = append(dst, strings.ToLower(s.TableName)...)
	for _, f := range [...]string{s.Identifier, s.IP, s.Protocol, s.Version, s.StartPK, s.StartRK, s.EndPK, s.EndRK} {
		dst = append(dst, '\n')
		dst = append(dst, f...)
	}
	return dst
}

func (s *SAS) appendAccountSTS(dst []byte, account string, withSES bool) []byte {
	dst = append(dst, account...)
	dst = append(dst, '\n')
	for _, f := range [...]string{s.Permissions, s.Services, s.ResourceTypes, s.Start, s.Expiry, s.IP, s.Protocol, s.Version} {
		dst = append(dst, f...)
		dst = append(dst, '\n')
	}
	if withSES {
		dst = append(dst, s.EncryptionScope...)
		dst = append(dst, '\n')
	}
	return dst
}

// Policy is a stored access policy (a signed identifier of Set Table ACL). Zero times and
// an empty Permission mean the field is not set in the policy.
type Policy struct {
	ID         string
	Start      time.Time
	Expiry     time.Time
	Permission string
}

// OpKind is an operation of the Table service, as far as authorization cares.
type OpKind int

// The operations. OpBatch is the $batch envelope: AuthorizeSAS checks everything but
// permissions for it, and the caller checks each contained operation with Grant.Check.
// OpUnknown is a request that names no operation of the service (a table-level comp it
// does not know, such as a misspelt one): AuthorizeSAS checks everything but permissions
// (the signature verifies, the SAS is in force, the table is its tn), and the server then
// answers it as it answers the account owner, 400 InvalidQueryParameterValue — a SAS
// request is not told "only the account owner may" about an operation that does not exist.
const (
	OpQueryEntities OpKind = iota + 1
	OpGetEntity
	OpInsert
	OpUpdate
	OpMerge
	OpDelete
	OpUpsertReplace
	OpUpsertMerge
	OpQueryTables
	OpCreateTable
	OpDeleteTable
	OpGetServiceProps
	OpSetServiceProps
	OpGetServiceStats
	OpGetACL
	OpSetACL
	OpBatch
	// OpGetTableSettings and OpSetTableSettings are Cerulean's table-settings extension
	// (GET and PUT /{table}?comp=properties).
	OpGetTableSettings
	OpSetTableSettings
	// OpReadChanges reads a table's change feed (GET /{table}?comp=changes): the
	// entities' states, so allowed where querying them is.
	OpReadChanges
	OpUnknown
)

var opNames = map[OpKind]string{
	OpQueryEntities: "Query Entities", OpGetEntity: "Get Entity", OpInsert: "Insert Entity",
	OpUpdate: "Update Entity", OpMerge: "Merge Entity", OpDelete: "Delete Entity",
	OpUpsertReplace: "Insert Or Replace Entity", OpUpsertMerge: "Insert Or Merge Entity",
	OpQueryTables: "Query Tables", OpCreateTable: "Create Table", OpDeleteTable: "Delete Table",
	OpGetServiceProps: "Get Table Service Properties", OpSetServiceProps: "Set Table Service Properties",
	OpGetServiceStats: "Get Table Service Stats", OpGetACL: "Get Table ACL", OpSetACL: "Set Table ACL",
	OpBatch:            "Entity Group Transaction",
	OpGetTableSettings: "Get Table Settings", OpSetTableSettings: "Set Table Settings",
	OpReadChanges: "Read Changes",
	OpUnknown:     "Unknown",
}

func (k OpKind) String() string {
	if n, ok := opNames[k]; ok {
		return n
	}
	return fmt.Sprintf("OpKind(%d)", int(k))
}

// opRule is what one operation needs: under a table SAS (tablePerms, all required;
// tableOK=false: not allowed at all), and under an account SAS (resource type srt, and
// permission letters: all of acctAll, plus at least one of acctAny when set;
// acctOK=false: not allowed).
type opRule struct {
	tableOK    bool
	tablePerms string
	acctOK     bool
	srt        byte
	acctAll    string
	acctAny    string
}

var opRules = map[OpKind]opRule{
	OpQueryEntities:   {tableOK: true, tablePerms: "r", acctOK: true, srt: 'o', acctAll: "r"},
	OpGetEntity:       {tableOK: true, tablePerms: "r", acctOK: true, srt: 'o', acctAll: "r"},
	OpInsert:          {tableOK: true, tablePerms: "a", acctOK: true, srt: 'o', acctAll: "a"},
	OpUpdate:          {tableOK: true, tablePerms: "u", acctOK: true, srt: 'o', acctAll: "u"},
	OpMerge:           {tableOK: true, tablePerms: "u", acctOK: true, srt: 'o', acctAll: "u"},
	OpDelete:          {tableOK: true, tablePerms: "d", acctOK: true, srt: 'o', acctAll: "d"},
	OpUpsertReplace:   {tableOK: true, tablePerms: "au", acctOK: true, srt: 'o', acctAll: "au"},
	OpUpsertMerge:     {tableOK: true, tablePerms: "au", acctOK: true, srt: 'o', acctAll: "au"},
	OpQueryTables:     {acctOK: true, srt: 'c', acctAll: "l"},
	OpCreateTable:     {acctOK: true, srt: 'c', acctAny: "cw"},
	OpDeleteTable:     {acctOK: true, srt: 'c', acctAll: "d"},
	OpGetServiceProps: {acctOK: true, srt: 's', acctAll: "r"},
	OpSetServiceProps: {acctOK: true, srt: 's', acctAll: "w"},
	OpGetServiceStats: {acctOK: true, srt: 's', acctAll: "r"},
	OpGetACL:          {},
	OpSetACL:          {},
	// A table's settings are the account's, like the table itself: never under a table
	// SAS, which grants entity operations on one table. Under an account SAS they are a
	// table's (srt=c) properties: read with r (or l, which lists them through Query Tables
	// with $select anyway) and written with w, as a container's properties and metadata
	// are in the Blob service.
	OpGetTableSettings: {acctOK: true, srt: 'c', acctAny: "rl"},
	OpSetTableSettings: {acctOK: true, srt: 'c', acctAll: "w"},
	// A change feed holds the entities' states: read where Query Entities is.
	OpReadChanges: {tableOK: true, tablePerms: "r", acctOK: true, srt: 'o', acctAll: "r"},
}

// Operation describes what a request wants to do, as decided by the server.
type Operation struct {
	Kind OpKind
	// Table is the table the request addresses (entity operations, ACL, Delete Table),
	// in the case the request used. For OpBatch it may be empty: each contained
	// operation's table is then checked by Grant.Check.
	Table string
	// HTTPS reports whether the request arrived over TLS.
	HTTPS bool
	// ClientIP is the address of the client (the TCP peer, or the address from a
	// trusted proxy header); nil fails any sip restriction.
	ClientIP net.IP
	// StrictProtocol makes spr=https refuse requests that arrived over plain HTTP (403
	// AuthorizationProtocolMismatch), as the service does. When false (lenient, the
	// default) spr is not enforced: the Go SDK's GetAccountSASURL always signs
	// spr=https, and Cerulean commonly serves plain HTTP locally, where strict checking
	// would make every such URL unusable. cerulean serve sets it when it serves HTTPS
	// (server.Options.StrictProtocol).
	StrictProtocol bool
}

// Grant is the outcome of a successful SAS authorization: what the server must keep
// enforcing while it executes the request. A nil *Grant (a request authenticated with
// the account key) allows everything; its methods may be called on nil.
type Grant struct {
	Account string
	Kind    SASKind
	// Table is the tn of a table SAS (as given); empty for an account SAS.
	Table string
	// Permissions are the effective permission letters (from sp or the stored policy).
	Permissions string
	// ResourceTypes is srt of an account SAS.
	ResourceTypes string
	// HasRange is set when a table SAS carries spk and/or epk. An empty bound is open:
	// the signature does not distinguish an absent parameter from an empty one.
	HasRange                       bool
	StartPK, StartRK, EndPK, EndRK string
}

// InRange reports whether the entity (pk, rk) lies inside the key range of the grant:
// (pk > spk or (pk == spk and rk >= srk)) and (pk < epk or (pk == epk and rk <= erk)),
// with bounds inclusive, comparison ordinal (bytewise), and absent (empty) bounds open:
// spk without srk admits every row key of spk, epk without erk likewise.
func (g *Grant) InRange(pk, rk string) bool {
	if g == nil || !g.HasRange {
		return true
	}
	if g.StartPK != "" {
		if pk < g.StartPK || (pk == g.StartPK && rk < g.StartRK) {
			return false
		}
	}
	if g.EndPK != "" {
		if pk > g.EndPK || (pk == g.EndPK && g.EndRK != "" && rk > g.EndRK) {
			return false
		}
	}
	return true
}

// CheckKeys returns nil when (pk, rk) is inside the grant's key range, else 403
// AuthorizationFailure. The server calls it for every single-entity operation (get,
// insert, update, merge, upserts, delete), including each operation of a batch, before
// touching storage.
func (g *Grant) CheckKeys(pk, rk string) error {
	if g.InRange(pk, rk) {
		return nil
	}
	return azerr.New(azerr.AuthorizationFailure).WithDetail(fmt.Sprintf(
		"The entity (PartitionKey '%s', RowKey '%s') is outside the key range of the shared access signature (spk '%s', srk '%s', epk '%s', erk '%s').",
		pk, rk, g.StartPK, g.StartRK, g.EndPK, g.EndRK))
}

// Check authorizes one operation on table under the grant: the SAS kind, the table
// name of a table SAS (case-insensitive), the resource type of an account SAS and the
// permission letters. AuthorizeSAS calls it for the request itself; the server calls it
// again for each operation inside a $batch (with that operation's kind and table). Keys
// are checked separately with CheckKeys.
func (g *Grant) Check(kind OpKind, table string) error {
	if g == nil {
		return nil
	}
	rule, ok := opRules[kind]
	if !ok {
		if kind == OpBatch || kind == OpUnknown {
			return g.checkTable(table)
		}
		return azerr.New(azerr.AuthorizationFailure).WithDetail(fmt.Sprintf("Operation %v is not allowed with a shared access signature.", kind))
	}
	switch g.Kind {
	case TableSAS:
		if !rule.tableOK {
			return azerr.New(azerr.AuthorizationFailure).WithDetail(fmt.Sprintf(
				"Operation %v is not allowed with a table (service) SAS: it grants entity operations on table '%s' only.", kind, g.Table))
		}
		if err := g.checkTable(table); err != nil {
			return err
		}
		if !hasAll(g.Permissions, rule.tablePerms) {
			return permissionMismatch(kind, g.Permissions, rule.tablePerms, "")
		}
	case AccountSAS:
		if !rule.acctOK {
			return azerr.New(azerr.AuthorizationFailure).WithDetail(fmt.Sprintf(
				"Operation %v is only allowed for the account owner (shared key), not with a shared access signature.", kind))
		}
		if strings.IndexByte(g.ResourceTypes, rule.srt) < 0 {
			return azerr.New(azerr.AuthorizationResourceTypeMismatch).WithDetail(fmt.Sprintf(
				"Operation %v needs signed resource type '%c' (srt); the SAS grants '%s'.", kind, rule.srt, g.ResourceTypes))
		}
		if !hasAll(g.Permissions, rule.acctAll) || (rule.acctAny != "" && !strings.ContainsAny(g.Permissions, rule.acctAny)) {
			return permissionMismatch(kind, g.Permissions, rule.acctAll, rule.acctAny)
		}
	default:
		return azerr.New(azerr.AuthorizationFailure)
	}
	return nil
}

func (g *Grant) checkTable(table string) error {
	if g.Kind != TableSAS || table == "" || strings.EqualFold(table, g.Table) {
		return nil
	}
	return azerr.New(azerr.AuthorizationFailure).WithDetail(fmt.Sprintf(
		"The shared access signature is for table '%s' (tn), not for table '%s'.", g.Table, table))
}

func hasAll(perms, need string) bool {
	for i := 0; i < len(need); i++ {
		if strings.IndexByte(perms, need[i]) < 0 {
			return false
		}
	}
	return true
}

func permissionMismatch(kind OpKind, have, all, anyOf string) *azerr.Error {
	need := "'" + all + "'"
	if anyOf != "" {
		need = "one of '" + anyOf + "'"
		if all != "" {
			need = "'" + all + "' and " + need
		}
	}
	return azerr.New(azerr.AuthorizationPermissionMismatch).WithDetail(fmt.Sprintf(
		"Operation %v needs signed permission %s (sp); the SAS grants '%s'.", kind, need, have))
}

// sasTimeText formats a time for error details the way the service does.
func sasTimeText(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("Mon, 02 Jan 2006 15:04:05 GMT")
}

// AuthorizeSAS authorizes a SAS-authenticated request for account (resolved by the server
// as for Authenticate). s comes from ParseSAS over the request's query; op says what the
// request wants to do; now is the current time; lookupPolicy resolves a stored access
// policy and is called only when the SAS has si, with the tn of the SAS and the
// identifier (the callback must match the table name case-insensitively).
//
// Checks, in this order (codes as the service, docs/protocol.md §8.6):
//
//  1. the SAS is well formed (as ParseSAS), and sig is the HMAC-SHA256 of the string to
//     sign (SAS.StringToSign) under one of the account's keys, compared in constant time;
//     an unknown account costs the same and fails the same way → 403 AuthenticationFailed;
//  2. si: the policy exists (else 403 AuthenticationFailed), no field is given both by the
//     policy and by the URL (sp, st, se; else 403 AuthenticationFailed), and sp and se are
//     then known from one of them (else 403 AuthenticationFailed); a lookup error is
//     returned as is;
//  3. st <= now <= se → else 403 AuthenticationFailed ("Signature not valid in the
//     specified time frame");
//  4. account SAS: ss contains 't' → else 403 AuthorizationServiceMismatch;
//  5. Grant.Check(op.Kind, op.Table): operation allowed for the SAS kind and tn matches
//     (else 403 AuthorizationFailure), srt covers the operation (else 403
//     AuthorizationResourceTypeMismatch), permissions (else 403
//     AuthorizationPermissionMismatch). For OpBatch and OpUnknown only tn is checked here;
//  6. spr=https over plain HTTP, when op.StrictProtocol → 403 AuthorizationProtocolMismatch;
//  7. sip: op.ClientIP within the address or range → else 403 AuthorizationSourceIPMismatch.
//
// On success it returns the Grant the server must enforce for the rest of the request.
func (v *Verifier) AuthorizeSAS(account string, s *SAS, op Operation, now time.Time,
	lookupPolicy func(table, id string) (Policy, bool, error)) (*Grant, error) {
	if s == nil {
		return nil, authFailed("No shared access signature was given.")
	}
	p, perr := s.parse()
	if perr != nil {
		return nil, perr
	}

	// 1. Signature.
	sc := scratchPool.Get().(*scratch)
	defer putScratch(sc)
	if p.kind == AccountSAS {
		sc.sts = s.appendAccountSTS(sc.sts[:0], account, p.signedSES)
	} else {
		sc.sts = s.appendTableSTS(sc.sts[:0], account)
	}
	matched := false
	va := v.accounts[account]
	if va == nil || len(va.keys) == 0 {
		decoyKey.sum(&sc.got, sc.sts)
	} else {
		for _, k := range va.keys {
			k.sum(&sc.got, sc.sts)
			if hmac.Equal(sc.got[:], p.sig[:]) {
				matched = true
			}
		}
	}
	if !matched {
		return nil, authFailed(fmt.Sprintf("Signature did not match. String to sign used was %s", strings.ReplaceAll(string(sc.sts), "\n", `\n`)))
	}
	if err := keyAccess(va); err != nil {
		return nil, err
	}

	// 2. Stored access policy.
	perms, start, expiry := s.Permissions, p.start, p.exp
	if s.Identifier != "" {
		if lookupPolicy == nil {
			return nil, authFailed(fmt.Sprintf("The signed identifier (si) '%s' cannot be resolved.", s.Identifier))
		}
		pol, ok, err := lookupPolicy(s.TableName, s.Identifier)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, authFailed(fmt.Sprintf("The signed identifier (si) '%s' does not match any stored access policy of table '%s'.", s.Identifier, s.TableName))
		}
		if pol.Permission != "" {
			if s.Permissions != "" {
				return nil, authFailed("The signed permissions (sp) are given both in the URL and in the stored access policy.")
			}
			if !onlyLetters(pol.Permission, p.permsAllowed) {
				return nil, authFailed(fmt.Sprintf("The stored access policy '%s' has invalid permissions '%s'.", pol.ID, pol.Permission))
			}
			perms = pol.Permission
		}
		if !pol.Start.IsZero() {
			if s.Start != "" {
				return nil, authFailed("The signed start (st) is given both in the URL and in the stored access policy.")
			}
			start = pol.Start
		}
		if !pol.Expiry.IsZero() {
			if s.Expiry != "" {
				return nil, authFailed("The signed expiry (se) is given both in the URL and in the stored access policy.")
			}
			expiry = pol.Expiry
		}
		if perms == "" {
			return nil, authFailed("The signed permissions (sp) are given neither in the URL nor in the stored access policy.")
		}
		if expiry.IsZero() {
			return nil, authFailed("The signed expiry (se) is given neither in the URL nor in the stored access policy.")
		}
	}

	// 3. Time window.
	if (!start.IsZero() && now.Before(start)) || now.After(expiry) {
		return nil, authFailed(fmt.Sprintf("Signature not valid in the specified time frame: Start [%s] - Expiry [%s] - Current [%s]",
			sasTimeText(start), sasTimeText(expiry), sasTimeText(now)))
	}

	g := &Grant{Account: account, Kind: p.kind, Permissions: perms}
	switch p.kind {
	case AccountSAS:
		// 4. Service.
		if strings.IndexByte(s.Services, 't') < 0 {
			return nil, azerr.New(azerr.AuthorizationServiceMismatch).WithDetail(fmt.Sprintf(
				"The signed services (ss) '%s' do not include the table service ('t').", s.Services))
		}
		g.ResourceTypes = s.ResourceTypes
	case TableSAS:
		g.Table = s.TableName
		g.HasRange = p.hasRange
		g.StartPK, g.StartRK, g.EndPK, g.EndRK = s.StartPK, s.StartRK, s.EndPK, s.EndRK
	}

	// 5. Operation, table, resource type, permissions.
	if err := g.Check(op.Kind, op.Table); err != nil {
		return nil, err
	}

	// 6. Protocol.
	if p.httpsOnly && !op.HTTPS && op.StrictProtocol {
		return nil, azerr.New(azerr.AuthorizationProtocolMismatch).WithDetail(
			"The shared access signature allows HTTPS only (spr=https) but the request was made over HTTP.")
	}

	// 7. Source IP.
	if p.ipLo != nil && !ipInRange(op.ClientIP, p.ipLo, p.ipHi) {
		return nil, azerr.New(azerr.AuthorizationSourceIPMismatch).WithDetail(fmt.Sprintf(
			"The request's source IP '%s' is not within the signed IP range (sip) '%s'.", op.ClientIP, s.IP))
	}
	return g, nil
}
