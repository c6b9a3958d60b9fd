"""rtl package."""
