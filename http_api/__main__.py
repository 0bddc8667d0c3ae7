"""`python -m http_api openapi` prints the OpenAPI document."""

from http_api.cli import main

if __name__ == "__main__":
    main()
