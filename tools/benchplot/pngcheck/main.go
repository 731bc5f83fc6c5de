// Command pngcheck fails unless a PNG file shows something: make pictures
// uses it on the headless browser's screenshot of the demo's picture.
//
//	pngcheck [-color '#3b6fc4' -min 200] screenshot.png
//
// It exits 1 if the file is missing, is not a PNG, is almost all one colour
// (a blank page: under 1% of the pixels differ from the most common
// colour), or has fewer than -min pixels of -color, a colour the picture
// must show (the demo's lock holds are #3b6fc4).
package main

import (
	"flag"
	"fmt"
	"image"
	"image/png"
	"io"
	"os"
	"strconv"
	"strings"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fl := flag.NewFlagSet("pngcheck", flag.ContinueOnError)
	fl.SetOutput(stderr)
	want := fl.String("color", "", "a colour, #rrggbb, that must cover at least -min pixels")
	minPixels := fl.Int("min", 100, "pixels of -color required")
	if err := fl.Parse(args); err != nil || fl.NArg() != 1 {
		fmt.Fprintln(stderr, "usage: pngcheck [-color #rrggbb] [-min N] FILE.png")
		return 2
	}
	name := fl.Arg(0)
	rep, err := check(name, *want, *minPixels)
	if err != nil {
		fmt.Fprintf(stderr, "pngcheck: %s: %v\n", name, err)
		return 1
	}
	fmt.Fprintf(stdout, "pngcheck: %s: %s\n", name, rep)
	return 0
}

// check opens and inspects the image; it returns a one-line report.
func check(name, want string, minPixels int) (string, error) {
	f, err := os.Open(name)
	if err != nil {
		return "", err
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		return "", err
	}
	return inspect(img, want, minPixels)
}

func inspect(img image.Image, want string, minPixels int) (string, error) {
	var target [3]uint8
	if want != "" {
		v, err := strconv.ParseUint(strings.TrimPrefix(want, "#"), 16, 32)
		if err != nil || len(strings.TrimPrefix(want, "#")) != 6 {
			return "", fmt.Errorf("-color %q: want #rrggbb", want)
		}
		target = [3]uint8{uint8(v >> 16), uint8(v >> 8), uint8(v)}
	}
	b := img.Bounds()
	total := b.Dx() * b.Dy()
	if total == 0 {
		return "", fmt.Errorf("empty image")
	}
	counts := map[[3]uint8]int{}
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			counts[[3]uint8{uint8(r >> 8), uint8(g >> 8), uint8(bl >> 8)}]++
		}
	}
	most := 0
	for _, n := range counts {
		most = max(most, n)
	}
	other := total - most
	if other*100 < total {
		return "", fmt.Errorf("blank: %d of %d pixels differ from the most common colour", other, total)
	}
	rep := fmt.Sprintf("%dx%d, %d colours, %.0f%% of the pixels off the background", b.Dx(), b.Dy(), len(counts), 100*float64(other)/float64(total))
	if want != "" {
		// Anti-aliasing blends edges; count exact and near matches.
		n := 0
		for c, k := range counts {
			if near(c, target) {
				n += k
			}
		}
		if n < minPixels {
			return "", fmt.Errorf("%d pixels of %s, want at least %d (%s)", n, want, minPixels, rep)
		}
		rep += fmt.Sprintf(", %d pixels of %s", n, want)
	}
	return rep, nil
}

func near(a, b [3]uint8) bool {
	for i := range a {
		d := int(a[i]) - int(b[i])
		if d < -3 || d > 3 {
			return false
		}
	}
	return true
}
