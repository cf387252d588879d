package bearer_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/ceruleandb/cerulean/internal/bearer"
)

// FuzzVerify feeds Authorization header values to TokenFromHeader and Verify, the entry
// point of every bearer request: no input may panic, every refusal must be a *bearer.Error
// of a known kind, and no error may quote the token. The seed corpus (testdata/fuzz/
// FuzzVerify) holds headers around the shape of real tokens — alg none, HMAC, wrong
// segment counts, bad base64 and JSON, huge numbers; f.Add adds tokens valid for this
// run's issuer, so mutations start from tokens that reach the key lookup and the claims.
func FuzzVerify(f *testing.F) {
	iss, key, v := staticIssuer(f)
	exp := time.Now().Add(time.Hour).Unix()
	valid := func(claims map[string]any) string { return sign(f, jose.RS256, key, "static", claims) }
	f.Add("Bearer " + valid(map[string]any{"iss": iss, "sub": "s", "aud": "https://storage.azure.com", "exp": exp}))
	f.Add("Bearer " + valid(map[string]any{"iss": iss, "oid": "o", "aud": []string{"x", "https://storage.azure.com/"}, "exp": exp, "groups": []string{"g"}, "roles": "r"}))
	f.Fuzz(func(t *testing.T, header string) {
		raw, ok := bearer.TokenFromHeader(header)
		if !ok {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		p, err := v.Verify(ctx, raw, "devstoreaccount1")
		if err == nil {
			if p.ObjectID == "" || p.Issuer != iss {
				t.Fatalf("accepted with principal %+v", p)
			}
			return
		}
		var be *bearer.Error
		if !errors.As(err, &be) || be.Kind < bearer.KindMalformed || be.Kind > bearer.KindUnavailable {
			t.Fatalf("error %v is not a *bearer.Error of a known kind", err)
		}
		if len(raw) >= 16 && strings.Contains(err.Error(), raw) {
			t.Fatalf("error %q quotes the token", err)
		}
	})
}
