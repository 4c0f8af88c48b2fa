"""Pages that compose several apps (the node page), on the top floor: they may read every app's
public surface, and no app imports them."""
