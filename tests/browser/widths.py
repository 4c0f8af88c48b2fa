"""Measuring a page's tables against their cards at 1440 px (the width tests' probe)."""

VIEWPORT = {"width": 1440, "height": 900}

# For every laid-out `table.data`: its card (the nearest scrolling ancestor, else `.card`, or
# the printed report's A4 `.sheet`), whether the card scrolls sideways, and the header of every
# column with a cell right of the card's visible edge (columns a stylesheet hides have no box
# and are not counted).
OVERFLOWS = """
() => Array.from(document.querySelectorAll('table.data')).flatMap((table, n) => {
  if (!table.getClientRects().length) return [];
  let card = table.parentElement;
  while (card && card !== document.body) {
    const o = getComputedStyle(card).overflowX;
    if (o === 'auto' || o === 'scroll' || o === 'hidden') break;
    if (card.classList.contains('card') || card.classList.contains('sheet')) break;
    card = card.parentElement;
  }
  const box = card.getBoundingClientRect();
  const edge = box.left + card.clientLeft + card.clientWidth + 1;
  const heads = Array.from(table.querySelectorAll('thead tr:last-child th'));
  const hidden = new Set();
  for (const row of table.rows) {
    Array.from(row.cells).forEach((cell, i) => {
      const r = cell.getBoundingClientRect();
      if (r.width > 0 && r.right > edge) {
        const head = (heads[i] && heads[i].textContent.trim()) || `column ${i + 1}`;
        hidden.add(head);
      }
    });
  }
  const scrolls = card.scrollWidth > card.clientWidth + 1;
  if (!hidden.size && !scrolls) return [];
  const title = card.querySelector('h2');
  return [{
    table: table.id || (title ? `"${title.textContent.trim()}"` : `table ${n + 1}`),
    scroll: `${card.scrollWidth} px in ${card.clientWidth} px`,
    hidden: Array.from(hidden),
  }];
})
"""
