package table

import (
	"context"

	"github.com/ceruleandb/cerulean/internal/azerr"
	"github.com/ceruleandb/cerulean/internal/storage"
	"github.com/ceruleandb/cerulean/internal/svcprops"
)

// TableACL returns a table's stored access policies, read as rd says. Authorization
// (a SAS naming a stored policy) reads them at Strong, the zero Read: a revoked policy
// must not keep working on a replica that has not replayed its revocation.
func (s *Service) TableACL(ctx context.Context, account, table string, rd Read) ([]svcprops.SignedIdentifier, Served, error) {
	v, err := s.view(ctx, rd, 0, entityScope)
	if err != nil {
		return nil, Served{}, err
	}
	b, err := v.GetTableACL(ctx, account, table)
	if err != nil {
		return nil, notFound(v, err), s.mapErr(err, entityScope)
	}
	s.markAvailable()
	ids, err := svcprops.UnmarshalACL(b)
	if err != nil {
		s.log.Error("corrupt stored access policies", "account", account, "table", table, "err", err)
		return nil, Served{}, azerr.New(azerr.InternalError)
	}
	return ids, served(v), nil
}

// SetTableACL replaces a table's stored access policies; they take effect at once.
func (s *Service) SetTableACL(ctx context.Context, account, table string, ids []svcprops.SignedIdentifier) error {
	return s.mapErr(s.eng.SetTableACL(ctx, account, table, svcprops.MarshalACL(ids)), entityScope)
}

// ServiceProperties returns the account's service properties (the defaults if never set)
// from the engine's latest state: for CORS (the rules a browser's request is answered
// by) and read-modify-write (UpdateServiceProperties). Get Table Service Properties
// reads them as the request says (ReadServiceProperties).
func (s *Service) ServiceProperties(ctx context.Context, account string) (svcprops.Properties, error) {
	return s.serviceProperties(ctx, s.eng, account)
}

// ReadServiceProperties returns the account's service properties, read as rd says.
func (s *Service) ReadServiceProperties(ctx context.Context, account string, rd Read) (svcprops.Properties, Served, error) {
	v, err := s.view(ctx, rd, 0, tableScope)
	if err != nil {
		return svcprops.Properties{}, Served{}, err
	}
	p, err := s.serviceProperties(ctx, v, account)
	if err != nil {
		return svcprops.Properties{}, Served{}, err
	}
	return p, served(v), nil
}

func (s *Service) serviceProperties(ctx context.Context, r storage.Reader, account string) (svcprops.Properties, error) {
	b, err := r.GetServiceProperties(ctx, account)
	if err != nil {
		return svcprops.Properties{}, s.mapErr(err, tableScope)
	}
	p, err := svcprops.UnmarshalProperties(b)
	if err != nil {
		s.log.Error("corrupt stored service properties", "account", account, "err", err)
		return svcprops.Properties{}, azerr.New(azerr.InternalError)
	}
	return p, nil
}

// UpdateServiceProperties applies a Set Table Service Properties request: sections it
// names replace the stored ones, the others are kept. Two concurrent updates of different
// sections may race (the later one wins whole); clients set properties rarely, from one
// place.
func (s *Service) UpdateServiceProperties(ctx context.Context, account string, u svcprops.PropertiesUpdate) error {
	p, err := s.ServiceProperties(ctx, account)
	if err != nil {
		return err
	}
	p = p.Apply(u)
	return s.mapErr(s.eng.SetServiceProperties(ctx, account, svcprops.MarshalProperties(p)), tableScope)
}
