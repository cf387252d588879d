package auth

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
)

// DevAccountName and DevAccountKey are the well-known development-storage credentials
// (docs/protocol.md §1.2) that every SDK, Azurite and Storage Explorer know.
const (
	DevAccountName = "devstoreaccount1"
	DevAccountKey  = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)

// MaxKeys is how many keys an account may have: Azure accounts have key1 and key2, so that
// a key can be rotated while clients still use the other.
const MaxKeys = 2

// Account is a storage account and its decoded HMAC keys (key1, then optionally key2).
type Account struct {
	Name string
	Keys [][]byte
	// SharedKeyOff refuses every request signed with the account's keys — SharedKey,
	// SharedKeyLite and shared access signatures — with 403
	// KeyBasedAuthenticationNotPermitted, as Azure does for an account with
	// allowSharedKeyAccess=false; only bearer tokens reach it then. The keys stay (the
	// console and tools that hold them are refused alike).
	SharedKeyOff bool
}

// DevAccount returns devstoreaccount1 with its well-known key. Each call returns fresh
// slices, so callers may keep or modify the result.
func DevAccount() Account {
	key, err := base64.StdEncoding.DecodeString(DevAccountKey)
	if err != nil {
		panic("auth: bad built-in dev key: " + err.Error())
	}
	return Account{Name: DevAccountName, Keys: [][]byte{key}}
}

// ValidAccountName reports whether name is a legal Azure storage account name: 3 to 24
// characters, lowercase ASCII letters and digits only. Account names appear in host names
// and in signed strings, so anything else could never authenticate anyway.
func ValidAccountName(name string) bool {
	if len(name) < 3 || len(name) > 24 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// ParseAccounts parses the --accounts / CERULEAN_ACCOUNTS value: items separated by ';',
// each "name:base64key". Spaces around items, names and keys are ignored, and so are empty
// items, so "a:K1; b:K2;" is fine. An account gets its second key either by repeating the
// name ("a:K1;a:K2") or Azurite-style as "a:K1:K2" (AZURITE_ACCOUNTS uses that form).
// Accounts are returned in order of first appearance, keys in the order given.
//
// Errors name the offending item but never echo key material. An empty (or all-blank)
// spec yields no accounts and no error; whether that is acceptable is the caller's call.
func ParseAccounts(spec string) ([]Account, error) {
	var accounts []Account
	index := map[string]int{}
	for n, item := range strings.Split(spec, ";") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		parts := strings.Split(item, ":")
		name := strings.TrimSpace(parts[0])
		if len(parts) < 2 {
			return nil, fmt.Errorf("accounts item %d (%q): want name:base64key", n+1, name)
		}
		if !ValidAccountName(name) {
			return nil, fmt.Errorf("accounts item %d: invalid account name %q: want 3-24 lowercase letters or digits", n+1, name)
		}
		i, seen := index[name]
		if !seen {
			i = len(accounts)
			index[name] = i
			accounts = append(accounts, Account{Name: name})
		}
		for k, enc := range parts[1:] {
			key, err := decodeKey(strings.TrimSpace(enc))
			if err != nil {
				return nil, fmt.Errorf("accounts item %d: account %q key %d: %w", n+1, name, k+1, err)
			}
			if len(accounts[i].Keys) == MaxKeys {
				return nil, fmt.Errorf("accounts item %d: account %q has more than %d keys", n+1, name, MaxKeys)
			}
			accounts[i].Keys = append(accounts[i].Keys, key)
		}
	}
	return accounts, nil
}

func decodeKey(enc string) ([]byte, error) {
	if enc == "" {
		return nil, errors.New("empty key")
	}
	key, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		// The base64 error quotes an offset only, never the input.
		return nil, fmt.Errorf("key is not valid standard base64 (%v)", err)
	}
	if len(key) == 0 {
		return nil, errors.New("empty key")
	}
	return key, nil
}
