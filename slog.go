package redlock

import (
	"context"
	"log/slog"
)

// SlogObserver returns an Observer that writes events to logger:
//   - WARN: a lock lost while Do's function ran; a lock acquired or extended
//     on a bare majority (once every node has answered, Margin 0: one more
//     node failure loses it); a release that failed;
//   - INFO: an Extend that failed;
//   - DEBUG: acquisitions, retries, releases, and each node's failure with
//     its class;
//
// and nothing for attempts or nodes that agreed or refused. A nil logger
// means slog.Default().
func SlogObserver(logger *slog.Logger) Observer {
	if logger == nil {
		logger = slog.Default()
	}
	return slogObserver{logger}
}

type slogObserver struct{ l *slog.Logger }

func (o slogObserver) Observe(ctx context.Context, e Event) {
	key := slog.String("key", e.Key)
	switch e.Kind {
	case EventLost:
		o.l.LogAttrs(ctx, slog.LevelWarn, "redlock: lock lost while held", key,
			slog.Duration("held_for", e.HeldFor), slog.Any("error", e.Err))
	case EventAcquired:
		o.l.LogAttrs(ctx, slog.LevelDebug, "redlock: lock acquired", key,
			slog.Duration("wait", e.Wait), slog.Int("tries", e.Try))
	case EventSettled:
		if e.Margin <= 0 && e.Quorum > 1 {
			o.l.LogAttrs(ctx, slog.LevelWarn, "redlock: lock held on a bare majority: one more node failure loses it",
				key, slog.String("op", e.Op.String()), slog.Int("held", e.Held), slog.Int("quorum", e.Quorum))
		}
	case EventReleaseFailed:
		o.l.LogAttrs(ctx, slog.LevelWarn, "redlock: release failed", key, slog.Any("error", e.Err))
	case EventExtendFailed:
		o.l.LogAttrs(ctx, slog.LevelInfo, "redlock: extend failed", key, slog.Any("error", e.Err))
	case EventNotAcquired:
		o.l.LogAttrs(ctx, slog.LevelDebug, "redlock: lock not acquired", key,
			slog.Int("tries", e.Try), slog.Duration("wait", e.Wait), slog.Any("error", e.Err))
	case EventRetry:
		o.l.LogAttrs(ctx, slog.LevelDebug, "redlock: retrying", key, slog.Int("try", e.Try), slog.Duration("delay", e.Delay))
	case EventReleased:
		o.l.LogAttrs(ctx, slog.LevelDebug, "redlock: lock released", key, slog.Duration("held_for", e.HeldFor))
	case EventNode:
		if e.Outcome == Failed {
			o.l.LogAttrs(ctx, slog.LevelDebug, "redlock: node failed", key, slog.String("op", e.Op.String()),
				slog.Int("node", e.Node), slog.String("addr", e.Addr), slog.String("class", e.Class), slog.Any("error", e.Err))
		}
	}
}
