package table

import (
	"context"

	"github.com/ceruleandb/cerulean/azerr"
	"github.com/ceruleandb/cerulean/svcprops"
)

// TableACL returns a table's stored access policies.
func (s *Service) TableACL(ctx context.Context, account, table string) ([]svcprops.SignedIdentifier, error) {
	b, err := s.eng.GetTableACL(ctx, account, table)
	if err != nil {
		return nil, s.mapErr(err, entityScope)
	}
	ids, err := svcprops.UnmarshalACL(b)
	if err != nil {
		s.log.Error("corrupt stored access policies", "account", account, "table", table, "err", err)
		return nil, azerr.New(azerr.InternalError)
	}
	return ids, nil
}

// SetTableACL replaces a table's stored access policies; they take effect at once.
func (s *Service) SetTableACL(ctx context.Context, account, table string, ids []svcprops.SignedIdentifier) error {
	return s.mapErr(s.eng.SetTableACL(ctx, account, table, svcprops.MarshalACL(ids)), entityScope)
}

// ServiceProperties returns the account's service properties (the defaults if never set).
func (s *Service) ServiceProperties(ctx context.Context, account string) (svcprops.Properties, error) {
	b, err := s.eng.GetServiceProperties(ctx, account)
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
