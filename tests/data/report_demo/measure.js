// Measures the rendered page for tests/it/report_html.rs: every visible text's size in CSS
// pixels (its font size times its SVG's scale), overlapping tick labels of one axis (and point
// labels, legend rows), text outside its chart, tables wider than their box without a visible
// hint, and whether the page itself scrolls sideways. Writes the result as JSON into <pre id="measurements">.
(function () {
  const out = { width: innerWidth, texts: 0, svgTexts: 0, charts: 0, drawnCharts: 0,
    chartWidths: [], small: [], overlaps: [], outside: [], scrolling: 0, unhinted: [], needless: [],
    pageWidth: document.documentElement.scrollWidth, smallest: { px: Infinity, text: '' },
    smallestSvg: { px: Infinity, text: '' } };
  // Drawn: laid out, not hidden, and not in a closed <details> (whose content keeps its
  // layout boxes but is not painted).
  const visible = (el) => el.checkVisibility({ visibilityProperty: true }) &&
    el.getClientRects().length > 0;
  const ownText = (el) => [...el.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim());
  const name = (el) => el.textContent.trim().slice(0, 60);
  for (const el of document.body.querySelectorAll('*')) {
    if (el.closest('title, script, style, #measurements') || !ownText(el) || !visible(el)) continue;
    let px = parseFloat(getComputedStyle(el).fontSize);
    if (el instanceof SVGElement) {
      const m = el.getScreenCTM();
      px *= Math.hypot(m.a, m.b);
      out.svgTexts++;
    }
    out.texts++;
    const least = el instanceof SVGElement ? out.smallestSvg : out.smallest;
    if (px < least.px) { least.px = Math.round(px * 100) / 100; least.text = name(el); }
    if (px < 11 - 1e-6) out.small.push({ text: name(el), px: Math.round(px * 100) / 100 });
  }
  const hit = (a, b) => a.left < b.right - 0.5 && b.left < a.right - 0.5 &&
    a.top < b.bottom - 0.5 && b.top < a.bottom - 0.5;
  for (const svg of document.querySelectorAll('svg.chart')) {
    if (!svg.closest('details:not([open])')) out.drawnCharts++;
    if (!visible(svg)) continue;
    out.charts++;
    out.chartWidths.push(svg.viewBox.baseVal.width);
    const box = svg.getBoundingClientRect();
    for (const axis of ['x', 'y']) {
      const labels = [...svg.querySelectorAll('text.tick.' + axis)].filter(visible);
      const rects = labels.map((l) => l.getBoundingClientRect());
      for (let i = 0; i < rects.length; i++) {
        for (let j = i + 1; j < rects.length; j++) {
          if (hit(rects[i], rects[j])) {
            out.overlaps.push({ chart: svg.querySelector('title').textContent, axis,
              a: name(labels[i]), b: name(labels[j]) });
          }
        }
      }
    }
    const points = [...svg.querySelectorAll('text.point-label')];
    const pointRects = points.map((l) => l.getBoundingClientRect());
    for (let i = 0; i < pointRects.length; i++) {
      for (let j = i + 1; j < pointRects.length; j++) {
        if (hit(pointRects[i], pointRects[j])) {
          out.overlaps.push({ chart: svg.querySelector('title').textContent, axis: 'points',
            a: name(points[i]), b: name(points[j]) });
        }
      }
    }
    const legend = [...svg.querySelectorAll('text.legend-text')];
    const legendRects = legend.map((l) => l.getBoundingClientRect());
    for (let i = 0; i + 1 < legendRects.length; i++) {
      if (hit(legendRects[i], legendRects[i + 1])) {
        out.overlaps.push({ chart: svg.querySelector('title').textContent, axis: 'legend',
          a: name(legend[i]), b: name(legend[i + 1]) });
      }
    }
    for (const t of svg.querySelectorAll('text')) {
      const r = t.getBoundingClientRect();
      if (r.left < box.left - 1 || r.right > box.right + 1 || r.top < box.top - 1 ||
          r.bottom > box.bottom + 1) {
        out.outside.push({ chart: svg.querySelector('title').textContent, text: name(t) });
      }
    }
  }
  for (const boxEl of document.querySelectorAll('.table-scroll')) {
    if (!visible(boxEl)) continue;
    if (boxEl.scrollWidth <= boxEl.clientWidth + 1) {
      const hint = boxEl.previousElementSibling;
      if (hint && hint.classList.contains('scroll-hint') && visible(hint)) {
        out.needless.push(name(boxEl.querySelector('tr')));
      }
      continue;
    }
    out.scrolling++;
    const hint = boxEl.previousElementSibling;
    if (!hint || !hint.classList.contains('scroll-hint') || !visible(hint)) {
      out.unhinted.push(name(boxEl.querySelector('tr')));
    }
  }
  const pre = document.createElement('pre');
  pre.id = "measurements";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
  if (parent !== window) parent.postMessage(pre.textContent, "*");
})();
