/* The library function benches/libcall.rs calls through the PLT: as cheap
 * as a call can be, so that what the call costs around it shows. */
long lc_cheap(long x)
{
	return x + 1;
}
