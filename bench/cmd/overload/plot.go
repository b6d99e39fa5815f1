package main

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"os"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"

	"github.com/tollgate/tollgate/overload"
)

var classColors = [levels]color.RGBA{
	{0x99, 0x99, 0x99, 0xff}, // SHEDDABLE
	{0x2c, 0x7f, 0xb8, 0xff}, // SHEDDABLE_PLUS
	{0xe6, 0x9f, 0x00, 0xff}, // CRITICAL
	{0xd7, 0x19, 0x1c, 0xff}, // CRITICAL_PLUS
}

// plotSweep draws, for each subject, the median served fraction of each
// criticality against the offered load, and the goodput, as one PNG.
func plotSweep(r *report, path string) error {
	xs, subjects := r.points("sweep")
	if len(xs) == 0 {
		return fmt.Errorf("-plot: no sweep measured")
	}
	const pw, ph, left, top, right, bottom = 360, 300, 50, 40, 15, 60
	img := image.NewRGBA(image.Rect(0, 0, pw*len(subjects), ph+30))
	draw.Draw(img, img.Bounds(), image.White, image.Point{}, draw.Src)
	xmax := xs[len(xs)-1]
	for i, s := range subjects {
		ox := i * pw
		px := func(x float64) int { return ox + left + int(x/xmax*float64(pw-left-right)) }
		py := func(y float64) int { return top + int((1-y)*float64(ph-top-bottom)) }
		grey := color.RGBA{0xdd, 0xdd, 0xdd, 0xff}
		for _, y := range []float64{0, 0.25, 0.5, 0.75, 1} {
			line(img, px(0), py(y), px(xmax), py(y), grey)
			text(img, ox+left-34, py(y)+4, fmt.Sprintf("%3.0f%%", 100*y), color.Black)
		}
		last := -100
		for _, x := range xs {
			line(img, px(x), py(0), px(x), py(0)+4, color.Black)
			if px(x)-last >= 24 { // labels too close would overlap
				text(img, px(x)-8, py(0)+18, fmt.Sprintf("%g", x), color.Black)
				last = px(x)
			}
		}
		line(img, px(0), py(0), px(xmax), py(0), color.Black)
		line(img, px(0), py(0), px(0), py(1), color.Black)
		text(img, ox+left, 20, s, color.Black)
		text(img, ox+left+60, ph-bottom+38, "offered load (x capacity)", color.Black)
		series := func(f func(*cell) float64, c color.RGBA, dashed bool) {
			var lx, ly int
			for j, x := range xs {
				cs := r.group("sweep", x, s)
				if len(cs) == 0 {
					continue
				}
				v := statOf(cs, f).med
				x0, y0 := px(x), py(min(v, 1))
				if j > 0 {
					thick(img, lx, ly, x0, y0, c, dashed)
				}
				square(img, x0, y0, c)
				lx, ly = x0, y0
			}
		}
		for k := range overload.Criticality(levels) {
			series(func(c *cell) float64 { return c.served(k) }, classColors[k], false)
		}
		series(r.goodput, color.RGBA{0, 0, 0, 0xff}, true)
	}
	// legend
	lx := 10
	for k := overload.CriticalPlus; ; k-- {
		square(img, lx+4, ph+15, classColors[k])
		text(img, lx+12, ph+20, k.String()+" served", color.Black)
		lx += 30 + 8*len(k.String()) + 40
		if k == 0 {
			break
		}
	}
	thick(img, lx, ph+15, lx+20, ph+15, color.RGBA{0, 0, 0, 0xff}, true)
	text(img, lx+24, ph+20, "goodput / capacity", color.Black)
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return png.Encode(f, img)
}

func text(img *image.RGBA, x, y int, s string, c color.Color) {
	d := font.Drawer{Dst: img, Src: image.NewUniform(c), Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
	d.DrawString(s)
}

func line(img *image.RGBA, x0, y0, x1, y1 int, c color.Color) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := sign(x1-x0), sign(y1-y0)
	e := dx + dy
	for {
		img.Set(x0, y0, c)
		if x0 == x1 && y0 == y1 {
			return
		}
		e2 := 2 * e
		if e2 >= dy {
			e += dy
			x0 += sx
		}
		if e2 <= dx {
			e += dx
			y0 += sy
		}
	}
}

func thick(img *image.RGBA, x0, y0, x1, y1 int, c color.RGBA, dashed bool) {
	if dashed {
		n := max(abs(x1-x0), abs(y1-y0)) / 6
		for i := 0; i < n; i += 2 {
			ax, ay := x0+(x1-x0)*i/n, y0+(y1-y0)*i/n
			bx, by := x0+(x1-x0)*(i+1)/n, y0+(y1-y0)*(i+1)/n
			line(img, ax, ay, bx, by, c)
			line(img, ax, ay+1, bx, by+1, c)
		}
		return
	}
	for d := -1; d <= 1; d++ {
		line(img, x0, y0+d, x1, y1+d, c)
	}
}

func square(img *image.RGBA, x, y int, c color.Color) {
	draw.Draw(img, image.Rect(x-3, y-3, x+4, y+4), image.NewUniform(c), image.Point{}, draw.Src)
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

func sign(v int) int {
	switch {
	case v > 0:
		return 1
	case v < 0:
		return -1
	}
	return 0
}
