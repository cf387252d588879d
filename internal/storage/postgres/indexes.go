package postgres

import (
	"context"
	"errors"

	"github.com/ceruleandb/cerulean/internal/index"
	"github.com/ceruleandb/cerulean/internal/storage"
)

// errIndexesNotBuilt: secondary indexes are being built on this engine (branch
// i46-indexes); these methods are replaced before the branch is merged.
var errIndexesNotBuilt = errors.New("postgres: secondary indexes are not built yet")

func (e *Engine) ScanIndex(ctx context.Context, account, table string, req storage.IndexScanRequest) (storage.IndexScanResult, error) {
	return storage.IndexScanResult{}, errIndexesNotBuilt
}

func (e *Engine) CountIndex(ctx context.Context, account, table string, idx uint32, spans []index.Span, limit int) (int, error) {
	return 0, errIndexesNotBuilt
}

func (e *Engine) CountRows(ctx context.Context, account, table string, start storage.Key, end *storage.Key, limit int) (int, error) {
	return 0, errIndexesNotBuilt
}

func (e *Engine) BuildIndexes(ctx context.Context) (int, error) { return 0, nil }

func (v *view) ScanIndex(ctx context.Context, account, table string, req storage.IndexScanRequest) (storage.IndexScanResult, error) {
	return storage.IndexScanResult{}, errIndexesNotBuilt
}

func (v *view) CountIndex(ctx context.Context, account, table string, idx uint32, spans []index.Span, limit int) (int, error) {
	return 0, errIndexesNotBuilt
}

func (v *view) CountRows(ctx context.Context, account, table string, start storage.Key, end *storage.Key, limit int) (int, error) {
	return 0, errIndexesNotBuilt
}
