package main

import (
	"context"
	"log"
	"os"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
)

// settle is how long the directory must be quiet after a change before it
// is read: an editor writes a file in several steps, a ConfigMap update is
// a handful of creates, renames and removes.
const settle = 200 * time.Millisecond

// watch sends SIGHUP on reload each time dir changes (a file written,
// created, removed or renamed, a ConfigMap's ..data symlink swapped), once
// the changes have settled, until ctx is done. It watches the directory,
// not the files: a ConfigMap replaces its files by swapping a symlink, and
// the files' own watches would be lost with them.
func watch(ctx context.Context, dir string, reload chan<- os.Signal, logger *log.Logger) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	if err := w.Add(dir); err != nil {
		w.Close()
		return err
	}
	go func() {
		defer w.Close()
		var timer *time.Timer
		var fire <-chan time.Time
		for {
			select {
			case <-ctx.Done():
				if timer != nil {
					timer.Stop()
				}
				return
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				if ev.Op == fsnotify.Chmod {
					continue
				}
				if timer == nil {
					timer = time.NewTimer(settle)
				} else {
					timer.Reset(settle)
				}
				fire = timer.C
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				logger.Printf("watching %s: %v", dir, err)
			case <-fire:
				fire = nil
				select {
				case reload <- syscall.SIGHUP:
				default: // a reload is already due
				}
			}
		}
	}()
	return nil
}
