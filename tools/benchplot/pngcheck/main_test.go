package main

import (
	"image"
	"image/color"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func page(w, h int, fill color.Color) *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			img.Set(x, y, fill)
		}
	}
	return img
}

func TestInspect(t *testing.T) {
	white := color.RGBA{255, 255, 255, 255}
	blue := color.RGBA{0x3b, 0x6f, 0xc4, 255}
	blank := page(100, 100, white)
	if _, err := inspect(blank, "", 0); err == nil || !strings.Contains(err.Error(), "blank") {
		t.Errorf("blank page: %v", err)
	}
	drawn := page(100, 100, white)
	for y := 10; y < 20; y++ { // 10×30 = 300 blue pixels: 3%
		for x := 10; x < 40; x++ {
			drawn.Set(x, y, blue)
		}
	}
	if _, err := inspect(drawn, "#3b6fc4", 300); err != nil {
		t.Errorf("a page with 300 blue pixels: %v", err)
	}
	if _, err := inspect(drawn, "#3b6fc4", 301); err == nil {
		t.Error("301 pixels of blue required, 300 present: no error")
	}
	if _, err := inspect(drawn, "#c0392b", 1); err == nil {
		t.Error("a colour the page lacks: no error")
	}
	if _, err := inspect(drawn, "blue", 1); err == nil {
		t.Error("bad colour: no error")
	}
}

func TestRun(t *testing.T) {
	dir := t.TempDir()
	name := filepath.Join(dir, "p.png")
	f, err := os.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := png.Encode(f, page(10, 10, color.Black)); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if code := run([]string{name}, io.Discard, io.Discard); code != 1 {
		t.Errorf("one-colour PNG: exit %d, want 1", code)
	}
	if code := run([]string{filepath.Join(dir, "missing.png")}, io.Discard, io.Discard); code != 1 {
		t.Errorf("missing file: exit %d, want 1", code)
	}
	if code := run(nil, io.Discard, io.Discard); code != 2 {
		t.Errorf("no file: exit %d, want 2", code)
	}
}
